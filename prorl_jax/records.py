"""The records that travel between the trainer and the rollout workers, and the trainer's prompt
groups, typed. They become JSON only at the edges (`to_json` before `RequestQueue.put` or a
checkpoint, `from_json` after a claim or a restore). No jax: workers use these in vLLM's
environment.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


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
    """The request as the exchange stores it (plain JSON types only)."""
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
    """The request a JSON body describes (checked first by `rollout.entries.check_request` when
    it comes from the exchange)."""
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


@dataclasses.dataclass(frozen=True)
class Group:
  """The N scored responses to one prompt: what dynamic sampling keeps or drops as a whole and the
  train batch is built from. Response arrays are [N, Tr] (right-padded to the result's width),
  per-response ones [N]."""

  uid: str
  prompt_ids: np.ndarray  # [Tp] the prompt's tokens, unpadded
  data_source: str
  tokens: np.ndarray  # [N, Tr] response tokens
  gen_logp: np.ndarray  # [N, Tr] log-probs under the sampling distribution
  lengths: np.ndarray  # [N] response lengths
  stopped: np.ndarray  # [N] ended on a stop token (else truncated)
  raw_scores: np.ndarray  # [N] the verifiers' scores
  verifier_failed: np.ndarray  # [N] the verifier failed (a fault, not a judgement)
  policy_version: int  # the weights that sampled it

  def to_json(self) -> dict:
    """As a checkpoint's carry-over buffer stores it (arrays as nested lists)."""
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in vars(self).items()}

  @classmethod
  def from_json(cls, d: dict) -> Group:
    """The inverse of `to_json`; a group stored before `verifier_failed` existed had none."""
    n = len(d["lengths"])
    return cls(
      uid=str(d.get("uid", "")),
      prompt_ids=np.asarray(d["prompt_ids"]),
      data_source=str(d.get("data_source", "")),
      tokens=np.asarray(d["tokens"]),
      gen_logp=np.asarray(d["gen_logp"]),
      lengths=np.asarray(d["lengths"]),
      stopped=np.asarray(d["stopped"]),
      raw_scores=np.asarray(d["raw_scores"]),
      verifier_failed=np.asarray(d.get("verifier_failed", np.zeros(n, bool))),
      policy_version=int(d["policy_version"]),
    )


@dataclasses.dataclass(frozen=True)
class Prefetch:
  """The pipelined next step's requests, put while this step trains: step `step`'s first `rounds`
  rounds of prompts, sampled with weights `version`. The loop state carries it, a checkpoint
  stores it, and a resumed run makes the exchange hold exactly these requests again."""

  step: int
  version: int
  rounds: int
  requests: dict[str, Request]  # by request id

  def to_json(self) -> dict:
    return {
      "step": self.step,
      "version": self.version,
      "rounds": self.rounds,
      "requests": self.requests_json(),
    }

  def requests_json(self) -> dict[str, dict]:
    """{request id: request body} as the exchange holds them."""
    return {rid: req.to_json() for rid, req in self.requests.items()}

  @classmethod
  def from_json(cls, d: dict) -> Prefetch:
    return cls(
      step=int(d["step"]),
      version=int(d["version"]),
      rounds=int(d.get("rounds", 1)),
      requests={rid: Request.from_json(b) for rid, b in d["requests"].items()},
    )
