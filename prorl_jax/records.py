"""The records that travel between the trainer and the rollout workers, and the trainer's prompt
groups, typed. They become JSON only at the edges (`to_json` before `RequestQueue.put` or a
checkpoint, `from_json` after a claim or a restore). No jax: workers use these in vLLM's env."""

from __future__ import annotations

import base64
import dataclasses
import json
import math
from typing import Any

import numpy as np


class InvalidEntry(ValueError):
  """A record or exchange entry that does not match its schema (says which field and why)."""


def require(cond: bool, msg: str):
  if not cond:
    raise InvalidEntry(msg)


def is_int(v, lo: int | None = 0) -> bool:  # an int (not a bool) of at least `lo`
  return isinstance(v, int) and not isinstance(v, bool) and (lo is None or v >= lo)


def is_num(v) -> bool:
  """A finite int or float (not a bool)."""
  return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclasses.dataclass(frozen=True)
class SamplingParams:
  """How to sample, the same for both engines (the JAX sampler and vLLM)."""

  max_new_tokens: int = 256
  temperature: float = 1.0  # 0 = greedy
  top_p: float = 1.0
  top_k: int = 0  # 0 = off
  stop_token_ids: tuple[int, ...] = ()

  def stopping_at(self, eos_id: int | None) -> SamplingParams:
    """With `eos_id` as the stop token where none is named: what a worker generates with."""
    keep = self.stop_token_ids or eos_id is None
    return self if keep else dataclasses.replace(self, stop_token_ids=(int(eos_id),))

  def to_json(self) -> dict:
    return dict(dataclasses.asdict(self), stop_token_ids=list(self.stop_token_ids))

  @classmethod
  def from_json(cls, d: dict) -> SamplingParams:
    """The settings a JSON object describes, checked (raises InvalidEntry naming the field)."""
    require(isinstance(d, dict), "sampling must be an object")
    require(is_int(d.get("max_new_tokens"), 1), "sampling.max_new_tokens must be an integer >= 1")
    for key in ("temperature", "top_p"):
      v = d.get(key, 1.0)
      require(is_num(v) and v >= 0, f"sampling.{key} {v!r} is not a finite number >= 0")
    require(is_int(d.get("top_k", 0)), "sampling.top_k must be an integer >= 0")
    stop = d.get("stop_token_ids") or []
    require(
      isinstance(stop, list) and all(is_int(t) for t in stop),
      "sampling.stop_token_ids must be a list of token ids",
    )
    return cls(
      max_new_tokens=d["max_new_tokens"],
      temperature=float(d.get("temperature", 1.0)),
      top_p=float(d.get("top_p", 1.0)),
      top_k=d.get("top_k", 0),
      stop_token_ids=tuple(stop),
    )


@dataclasses.dataclass(frozen=True)
class PromptItem:
  """One prompt as a data source hands it out: its token ids, the data source that names its
  verifier, the reference answer, a stable id and the row's extra information; the demo's items
  also carry their text and a worked solution (its warm start trains on them)."""

  prompt_ids: list[int]
  data_source: str
  reference: Any
  uid: str
  extra: dict = dataclasses.field(default_factory=dict)
  prompt: str = ""
  solution: str = ""


@dataclasses.dataclass(frozen=True)
class PromptMeta:
  """What a worker needs to score one prompt's responses."""

  data_source: str  # names the verifier (through the request's routing table)
  reference: Any = None
  extra: dict = dataclasses.field(default_factory=dict)
  uid: str = ""

  @classmethod
  def of_item(cls, item: PromptItem) -> PromptMeta:
    return cls(item.data_source, item.reference, item.extra, item.uid)


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
    return len(self.prompts) * self.n  # response rows of the result: prompt-major, n a prompt

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
    """The request a JSON body describes, checked: prompts of token ids, n, the sampling
    settings, seed and versions, one meta object per prompt naming its data source, the routing
    table; raises InvalidEntry naming the field otherwise. The one schema of a request: the
    exchange checks every body it reads with it."""
    require(isinstance(d, dict), "a request must be an object")
    prompts = d.get("prompts")
    require(
      isinstance(prompts, list)
      and prompts
      and all(isinstance(p, list) and p and all(is_int(t) for t in p) for p in prompts),
      "prompts must be a non-empty list of non-empty token-id lists",
    )
    require(is_int(d.get("n"), 1), f"n {d.get('n')!r} is not an integer >= 1")
    sampling = SamplingParams.from_json(d.get("sampling"))
    meta = d.get("meta")
    require(
      isinstance(meta, list)
      and len(meta) == len(prompts)
      and all(isinstance(m, dict) for m in meta),
      "meta must be one object per prompt",
    )
    require(
      all(isinstance(m.get("data_source"), str) and m["data_source"] for m in meta),
      "every meta object needs a data_source (it names the verifier that scores the prompt)",
    )
    require(
      all(isinstance(m.get("extra", {}), dict) and isinstance(m.get("uid", ""), str) for m in meta),
      "a meta object's extra must be an object and its uid a string",
    )
    require(is_int(d.get("seed", 0), None), "seed must be an integer")
    require(is_int(d.get("min_version", 0)), "min_version must be an integer >= 0")
    require(
      d.get("max_version") is None or is_int(d["max_version"]),
      "max_version must be null or an integer >= 0",
    )
    routing = d.get("routing")
    require(
      routing is None
      or (isinstance(routing, dict) and all(isinstance(v, str) for v in routing.values())),
      "routing must be an object of verifier names",
    )
    return cls(
      prompts=[list(p) for p in prompts],
      n=d["n"],
      sampling=sampling,
      meta=[
        PromptMeta(m["data_source"], m.get("reference"), m.get("extra", {}), m.get("uid", ""))
        for m in meta
      ],
      seed=d.get("seed", 0),
      min_version=d.get("min_version", 0),
      max_version=d.get("max_version"),
      routing=routing,
    )

  def canonical(self) -> str:
    """The request as one JSON string (sorted keys): equal for equal requests, however made."""
    return json.dumps(self.to_json(), sort_keys=True)


@dataclasses.dataclass(frozen=True)
class EngineStats:
  """An engine's counts of one generate call; None: this engine does not count it (the static
  sampler and vLLM count none; continuous batching counts all four)."""

  peak_pages: int | None = None  # the most KV-cache pages in use at once
  page_bytes: int | None = None  # the bytes of one page, all layers, keys and values
  decode_steps: int | None = None  # decode steps of the continuous batch
  weight_swaps: int | None = None  # newer weights swapped in mid-generation (in-flight updates)

  def to_json(self) -> dict:
    return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

  @classmethod
  def from_json(cls, d: dict) -> EngineStats:
    """From a result's `engine_stats` (checked by the exchange: finite numbers >= 0); names this
    version does not know are left out."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: int(v) for k, v in d.items() if k in names})

  @property
  def peak_kv_bytes(self) -> float | None:
    """The KV cache the call needed at its peak (None unless both counts are known)."""
    if self.peak_pages is None or self.page_bytes is None:
      return None
    return float(self.peak_pages) * float(self.page_bytes)


@dataclasses.dataclass(frozen=True)
class Generation:
  """What every engine's `generate` returns (`rollout/engines`): R = len(prompts)·n rows,
  prompt-major (all n of prompt 0 first), right-padded to Tr columns."""

  tokens: np.ndarray  # [R, Tr] int32 response tokens
  logprobs: np.ndarray  # [R, Tr] float32 the engine's log-probs of them
  lengths: np.ndarray  # [R] int32
  stopped: np.ndarray  # [R] bool: ended on a stop token (else at the length limit)
  # [R, Tr] int32 the weights version that drew each token (in-flight updates), or None
  versions: np.ndarray | None = None
  stats: EngineStats = EngineStats()

  @classmethod
  def of(cls, tokens, logprobs, lengths, stopped, versions=None, stats=None) -> Generation:
    """From any array-likes, in the dtypes above."""
    return cls(
      np.asarray(tokens, np.int32),
      np.asarray(logprobs, np.float32),
      np.asarray(lengths, np.int32),
      np.asarray(stopped, bool),
      None if versions is None else np.asarray(versions, np.int32),
      stats or EngineStats(),
    )


@dataclasses.dataclass(frozen=True)
class Result:
  """A request's scored responses as a worker committed them (checked by the exchange): R =
  len(prompts)·n rows, prompt-major, right-padded to Tr columns."""

  tokens: np.ndarray  # [R, Tr] response tokens
  logprobs: np.ndarray  # [R, Tr] the engine's log-probs of them
  lengths: np.ndarray  # [R]
  stopped: np.ndarray  # [R] ended on a stop token (else truncated)
  scores: np.ndarray  # [R] in [0, 1]
  verifier_failed: np.ndarray  # [R] the verifier failed (a fault, not a judgement)
  policy_version: int  # the weights that sampled it
  worker: str = ""
  attempt: int = 0  # the worker's attempt at the request (0: the first)
  probe_mismatch: dict | None = None  # {max, mean} of the engine/trainer probe, when measured
  verifier_stats: dict = dataclasses.field(default_factory=dict)  # {"math/scored": count, ...}
  weights_wait_s: float | None = None  # how long the worker waited for these weights
  # the engine's counts of this request (continuous batching: peak KV pages, page bytes, decode
  # steps, weight swaps); None each for engines that count none
  engine_stats: EngineStats = EngineStats()
  # [R, Tr] the weights version that drew each token (in-flight updates; >= policy_version), or
  # None: every token is policy_version's
  versions: np.ndarray | None = None
  generate_s: float | None = None  # the worker's seconds generating the request
  score_s: float | None = None  # and scoring it
  reasons: tuple[str, ...] = ()  # [R] each verdict's reason, when the worker gave them

  ARRAYS = ("tokens", "logprobs", "lengths", "stopped", "scores", "verifier_failed")
  FIELDS = ("policy_version", "worker", "attempt", "probe_mismatch", "verifier_stats")

  @classmethod
  def of(cls, manifest: dict, arrays: dict[str, np.ndarray]) -> Result:
    """From a checked result manifest and its checked arrays."""
    seconds = {k: manifest.get(k) for k in ("weights_wait_s", "generate_s", "score_s")}
    reasons = manifest.get("reasons")
    return cls(
      **{k: arrays[k] for k in cls.ARRAYS},
      policy_version=int(manifest["policy_version"]),
      worker=str(manifest.get("worker", "")),
      attempt=int(manifest.get("attempt", 0)),
      probe_mismatch=manifest.get("probe_mismatch") or None,
      verifier_stats=dict(manifest.get("verifier_stats", {})),
      engine_stats=EngineStats.from_json(manifest.get("engine_stats", {})),
      versions=arrays.get("versions"),
      **{k: float(v) if is_num(v) and v >= 0 else None for k, v in seconds.items()},
      reasons=tuple(map(str, reasons)) if isinstance(reasons, list) else (),
    )

  def stored(self) -> tuple[dict[str, np.ndarray], dict]:
    """The stored form, which `of` reads back: the arrays (`versions` with them when set) and
    the manifest's fields of the result itself; the store adds where it keeps them (request
    id, data key, size, sha256, commit time)."""
    arrays = dict(self.arrays(), **({} if self.versions is None else {"versions": self.versions}))
    seconds = {k: getattr(self, k) for k in ("weights_wait_s", "generate_s", "score_s")}
    fields = {k: getattr(self, k) for k in self.FIELDS}
    return arrays, dict(
      fields, **seconds, reasons=list(self.reasons), engine_stats=self.engine_stats.to_json()
    )

  def arrays(self) -> dict[str, np.ndarray]:
    return {k: getattr(self, k) for k in self.ARRAYS}


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
    """As a checkpoint's carry-over buffer stores it: each array with its dtype, shape and bytes
    (`array_json`), so it reads back exactly as it was."""
    return {k: array_json(v) if isinstance(v, np.ndarray) else v for k, v in vars(self).items()}

  @classmethod
  def from_json(cls, d: dict) -> Group:
    """The inverse of `to_json`; reads the nested lists of checkpoints written before arrays
    were stored as arrays, and a group stored before `verifier_failed` existed (none failed)."""
    n = len(json_array(d["lengths"]))
    return cls(
      uid=str(d.get("uid", "")),
      prompt_ids=json_array(d["prompt_ids"]),
      data_source=str(d.get("data_source", "")),
      tokens=json_array(d["tokens"]),
      gen_logp=json_array(d["gen_logp"]),
      lengths=json_array(d["lengths"]),
      stopped=json_array(d["stopped"]),
      raw_scores=json_array(d["raw_scores"]),
      verifier_failed=json_array(d.get("verifier_failed", np.zeros(n, bool))),
      policy_version=int(d["policy_version"]),
    )


def array_json(a: np.ndarray) -> dict:
  """An array as JSON: {dtype, shape, b64 of its bytes} (exact, and ~4/3 of its size)."""
  a = np.ascontiguousarray(a)
  return {"dtype": a.dtype.str, "shape": list(a.shape), "b64": base64.b64encode(a.data).decode()}


def json_array(v) -> np.ndarray:
  """The array `array_json` made, or (an older checkpoint) of a nested list."""
  if isinstance(v, dict):
    flat = np.frombuffer(base64.b64decode(v["b64"]), np.dtype(v["dtype"]))
    return flat.reshape(v["shape"]).copy()
  return np.asarray(v)


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
