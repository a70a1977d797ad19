"""Evaluation through the exchange: pass@1 averaged over k samples and unbiased pass@k.

In-loop validation calls `evaluate`, through the same exchange and workers as training.
"""

from __future__ import annotations

import collections
import logging
import time
from math import comb
from typing import Callable

import numpy as np

from prorl_jax.rollout.exchange import Exchange

log = logging.getLogger(__name__)


def pass_at_k(n: int, c: int, k: int) -> float:
  """Unbiased pass@k from n samples with c correct: 1 − C(n−c, k)/C(n, k)."""
  if n - c < k:
    return 1.0
  return 1.0 - comb(n - c, k) / comb(n, k)


class WaitTimeout(RuntimeError):
  pass


def wait_for_results(ex: Exchange, rids: list[str], *, timeout_s: float, what: str,
                     on_idle: Callable[[], str] | None = None, poll_s: float = 0.05) -> dict:
  """{rid: (manifest, arrays)} once every request has a verified result; raises on timeout.

  Corrupt results are requeued (a worker redoes them). Logs what it waits for every 30 s.
  """
  done, t0, last_log = {}, time.time(), time.time()
  pending = list(rids)
  while pending:
    still = []
    for rid in pending:
      if ex.is_committed(rid):
        res = ex.read_result(rid)
        if res is None:
          ex.requeue(rid)
          still.append(rid)
        else:
          done[rid] = res
      else:
        still.append(rid)
    pending = still
    if not pending:
      break
    extra = on_idle() if on_idle else ""
    now = time.time()
    if now - t0 > timeout_s:
      raise WaitTimeout(f"timed out after {timeout_s:.0f}s waiting for {what}: "
                        f"{len(pending)}/{len(rids)} results missing on {ex.url} {extra}; "
                        "are rollout workers running (rollout.local_workers, or external "
                        "workers on this exchange)?")
    if now - last_log > 30:
      log.info("waiting for %s: %d/%d results on %s %s", what, len(rids) - len(pending),
               len(rids), ex.url, extra)
      last_log = now
    time.sleep(poll_s)
  return done


def evaluate(ex: Exchange, items: list[dict], *, samples: int, sampling: dict, version: int,
             ks: list[int], timeout_s: float, tag: str, chunk: int = 1024, seed: int = 0,
             on_idle=None) -> dict:
  """pass@1 (mean over samples) and pass@k per data source and overall."""
  rids = []
  for c in range(0, len(items), chunk):
    part = items[c:c + chunk]
    rids.append(ex.put_request({
        "prompts": [it["prompt_ids"] for it in part], "n": samples, "sampling": sampling,
        "seed": seed + c, "min_version": version, "max_version": version,
        "meta": [{"data_source": it["data_source"], "reference": it["reference"],
                  "extra": it.get("extra", {}), "uid": it["uid"]} for it in part]},
        request_id=f"{tag}-c{c // chunk:04d}"))
  results = wait_for_results(ex, rids, timeout_s=timeout_s, what=f"evaluation {tag}",
                             on_idle=on_idle)
  per_source = collections.defaultdict(list)
  failed = 0
  for c, rid in enumerate(rids):
    _, arrays = results[rid]
    part = items[c * chunk:(c + 1) * chunk]
    scores = arrays["scores"].reshape(len(part), samples)
    failed += int(arrays["verifier_failed"].sum())
    for it, s in zip(part, scores):
      per_source[it["data_source"]].append(s)
    ex.retire(rid)
  out = {"verifier_failures": failed}
  all_scores = []
  for src, rows in sorted(per_source.items()):
    s = np.stack(rows)
    all_scores.append(s)
    out[f"{src}/pass@1"] = float(s.mean())
    for k in ks:
      if k > 1:
        out[f"{src}/pass@{k}"] = float(np.mean([pass_at_k(samples, int((r >= 1).sum()), k)
                                               for r in s]))
  s = np.concatenate(all_scores)
  out["pass@1"] = float(s.mean())
  for k in ks:
    if k > 1:
      out[f"pass@{k}"] = float(np.mean([pass_at_k(samples, int((r >= 1).sum()), k) for r in s]))
  return out
