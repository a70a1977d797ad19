"""The records that travel between the trainer and the rollout workers, typed. They become JSON
only at the exchange's edge (`to_json` before `RequestQueue.put`, `from_json` after a claim
or when a checkpoint's prefetch is read back). No jax: workers use these in vLLM's environment.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class SamplingParams:
  """How to sample, the same for both engines (the JAX sampler and vLLM)."""

  max_new_tokens: int = 256
  temperature: float = 1.0  # 0 = greedy
  top_p: float = 1.0
  top_k: int = 0  # 0 = off
  stop_token_ids: tuple[int, ...] = ()

  def to_json(self) -> dict:
    return dict(dataclasses.asdict(self), stop_token_ids=list(self.stop_token_ids))

  @classmethod
  def from_json(cls, d: dict) -> SamplingParams:
    return cls(
      max_new_tokens=int(d["max_new_tokens"]),
      temperature=float(d.get("temperature", 1.0)),
      top_p=float(d.get("top_p", 1.0)),
      top_k=int(d.get("top_k", 0)),
      stop_token_ids=tuple(int(t) for t in d.get("stop_token_ids") or ()),
    )


@dataclasses.dataclass(frozen=True)
class PromptMeta:
  """What a worker needs to score one prompt's responses."""

  data_source: str  # names the verifier (through the request's routing table)
  reference: Any = None
  extra: dict = dataclasses.field(default_factory=dict)
  uid: str = ""

  @classmethod
  def of_item(cls, item: dict) -> PromptMeta:
    return cls(item["data_source"], item["reference"], item.get("extra", {}), item["uid"])


@dataclasses.dataclass(frozen=True)
class Request:
  """n samples of each prompt, from a weight version in [min_version, max_version]."""

  prompts: list[list[int]]
  n: int
  sampling: SamplingParams
  meta: list[PromptMeta]
  seed: int = 0
  min_version: int = 0
  max_version: int | None = None
  routing: dict | None = None

  @property
  def rows(self) -> int:
    """Response rows of the result: prompt-major, n per prompt."""
    return len(self.prompts) * self.n

  def to_json(self) -> dict:
    body = {
      "prompts": [[int(t) for t in p] for p in self.prompts],
      "n": int(self.n),
      "sampling": self.sampling.to_json(),
      "seed": int(self.seed),
      "min_version": int(self.min_version),
      "max_version": self.max_version,
      "meta": [dataclasses.asdict(m) for m in self.meta],
    }
    if self.routing is not None:
      body["routing"] = self.routing
    return body

  @classmethod
  def from_json(cls, d: dict) -> Request:
    return cls(
      prompts=[list(p) for p in d["prompts"]],
      n=int(d["n"]),
      sampling=SamplingParams.from_json(d["sampling"]),
      meta=[
        PromptMeta(m["data_source"], m.get("reference"), m.get("extra", {}), m.get("uid", ""))
        for m in d["meta"]
      ],
      seed=int(d.get("seed", 0)),
      min_version=int(d.get("min_version", 0)),
      max_version=d.get("max_version"),
      routing=d.get("routing"),
    )
