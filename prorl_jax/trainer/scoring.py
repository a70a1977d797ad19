"""Scoring a model through the exchange: pass@1 averaged over k samples and unbiased pass@k.

In-loop validation (`trainer.versions`), `prorl-eval` (`cli.eval`) and the evaluation suite
(`evaluation.runner`) all call `evaluate`, through the same exchange and workers as training.
"""

from __future__ import annotations

import collections
import logging
from math import comb

import numpy as np

from prorl_jax import rewards
from prorl_jax.records import PromptMeta, Request, SamplingParams
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.rollout.queue import wait_for_results

log = logging.getLogger(__name__)


def pass_at_k(n: int, c: int, k: int) -> float:
  """Unbiased pass@k from n samples with c correct: 1 − C(n−c, k)/C(n, k)."""
  if n - c < k:
    return 1.0
  return 1.0 - comb(n - c, k) / comb(n, k)


def collect(
  ex: Exchange,
  items: list[dict],
  *,
  samples: int,
  sampling: SamplingParams,
  version: int,
  timeout_s: float,
  tag: str,
  chunk: int = 1024,
  seed: int = 0,
  on_idle=None,
) -> dict[str, np.ndarray]:
  """Samples `samples` responses per item from weights `version` and scores them:
  {"scores", "failed" (the verifier failed), "lengths"}, each [len(items), samples]."""
  rids, requests = [], {}
  for c in range(0, len(items), chunk):
    part = items[c : c + chunk]
    rid = f"{tag}-c{c // chunk:04d}"
    requests[rid] = Request(
      prompts=[list(it.prompt_ids) for it in part],
      n=samples,
      sampling=sampling,
      meta=[PromptMeta.of_item(it) for it in part],
      seed=seed + c,
      min_version=version,
      max_version=version,
    )
    rids.append(ex.queue.put(requests[rid], request_id=rid))
  results = wait_for_results(
    ex.queue,
    rids,
    timeout_s=timeout_s,
    what=f"evaluation {tag}",
    on_idle=on_idle,
    requests=requests,
  )
  out = {"scores": [], "failed": [], "lengths": []}
  for c, rid in enumerate(rids):
    res = results[rid]
    n = len(items[c * chunk : (c + 1) * chunk])
    out["scores"].append(res.scores.reshape(n, samples).astype(np.float64))
    out["failed"].append(res.verifier_failed.reshape(n, samples).astype(bool))
    out["lengths"].append(res.lengths.reshape(n, samples).astype(np.int64))
    ex.queue.retire(rid)
  return {k: np.concatenate(v) for k, v in out.items()}


def group_key(item: dict) -> str:
  """What an item is reported under: its benchmark (prepared suites), else its data source."""
  return str(item.extra.get("benchmark") or item.data_source)


def summarize(scores: np.ndarray, failed: np.ndarray, *, continuous, ks: list[int]) -> dict:
  """One benchmark's numbers from its [prompts, samples] scores. pass@1 is the mean over
  samples of a binary score (score == 1), or of the score itself for `continuous` verifiers;
  pass@k (unbiased, k > 1) counts score == 1 as a success. Samples whose verifier failed are
  left out and counted. `continuous`: one flag, or one per prompt."""
  ok = ~failed
  binary = scores >= 1.0
  cont = np.broadcast_to(np.asarray(continuous, bool), scores.shape[:1])
  per_prompt = [
    (s[m] if c else b[m].astype(np.float64))
    for s, b, m, c in zip(scores, binary, ok, cont)
    if m.any()
  ]
  out = {
    "prompts": int(scores.shape[0]),
    "samples": int(scores.shape[1]),
    "verifier_failures": int(failed.sum()),
    "pass@1": float(np.mean([p.mean() for p in per_prompt])) if per_prompt else None,
  }
  for k in ks:
    if k > 1:
      vals = [
        pass_at_k(int(m.sum()), int((b & m).sum()), k) for b, m in zip(binary, ok) if m.sum() >= k
      ]
      out[f"pass@{k}"] = float(np.mean(vals)) if vals else None
  return out


def evaluate(
  ex: Exchange,
  items: list[dict],
  *,
  samples: int,
  sampling: SamplingParams,
  version: int,
  ks: list[int],
  timeout_s: float,
  tag: str,
  chunk: int = 1024,
  seed: int = 0,
  on_idle=None,
  routing: dict[str, str] | None = None,
) -> dict:
  """pass@1 and pass@k per benchmark (or data source) and overall (see `summarize`)."""

  got = collect(
    ex,
    items,
    samples=samples,
    sampling=sampling,
    version=version,
    timeout_s=timeout_s,
    tag=tag,
    chunk=chunk,
    seed=seed,
    on_idle=on_idle,
  )
  groups = collections.defaultdict(list)
  for i, it in enumerate(items):
    groups[group_key(it)].append(i)
  out = {"verifier_failures": int(got["failed"].sum())}
  for name, idx in sorted(groups.items()):
    cont = rewards.continuous(items[idx[0]].data_source, routing)
    res = summarize(got["scores"][idx], got["failed"][idx], continuous=cont, ks=ks)
    for k, v in res.items():
      if k.startswith("pass@") and v is not None:
        out[f"{name}/{k}"] = v
  cont = [rewards.continuous(it.data_source, routing) for it in items]
  for k, v in summarize(got["scores"], got["failed"], continuous=cont, ks=ks).items():
    if k.startswith("pass@") and v is not None:
      out[k] = v
  return out
