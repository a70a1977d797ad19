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
                     on_idle: Callable[[], str] | None = None, poll_s: float = 0.05,
                     rows: dict[str, int] | None = None) -> dict:
  """{rid: (manifest, arrays)} once every request has a verified result; raises on timeout.

  `rows[rid]`: the response rows request `rid` asks for (a result of another shape is
  malformed). Corrupt or malformed results are requeued (a worker redoes them). Logs what it
  waits for every 30 s.
  """
  done, t0, last_log = {}, time.time(), time.time()
  pending = list(rids)
  while pending:
    still = []
    for rid in pending:
      if ex.is_committed(rid):
        res = ex.read_result(rid, (rows or {}).get(rid))
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
  rids, rows = [], {}
  for c in range(0, len(items), chunk):
    part = items[c:c + chunk]
    rows[f"{tag}-c{c // chunk:04d}"] = len(part) * samples
    rids.append(ex.put_request({
        "prompts": [it["prompt_ids"] for it in part], "n": samples, "sampling": sampling,
        "seed": seed + c, "min_version": version, "max_version": version,
        "meta": [{"data_source": it["data_source"], "reference": it["reference"],
                  "extra": it.get("extra", {}), "uid": it["uid"]} for it in part]},
        request_id=f"{tag}-c{c // chunk:04d}"))
  results = wait_for_results(ex, rids, timeout_s=timeout_s, what=f"evaluation {tag}",
                             on_idle=on_idle, rows=rows)
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


def evaluate_checkpoint(cfg, checkpoint: str) -> dict:
  """Evaluates a HF directory (a published version, a base model) on the config's held-out set,
  through a private exchange and local workers."""
  import os
  import tempfile

  from prorl_jax import config as config_lib
  from prorl_jax import data
  from prorl_jax.rollout.local import LocalWorkers, check_worker_python, worker_python
  from prorl_jax.tokenizer import load_tokenizer

  config_lib.validate(cfg)
  if not os.path.isfile(os.path.join(checkpoint, "config.json")):
    raise config_lib.ConfigError(f"--checkpoint={checkpoint!r} is not a HF model directory")
  tok = load_tokenizer(checkpoint)
  split = lambda s: [x for x in s.split(",") if x]  # noqa: E731
  _, items = data.make_sources(tok, train_files=split(cfg.data.train_files),
                               val_files=split(cfg.data.val_files), weights=None,
                               max_prompt_len=cfg.rollout.max_prompt_len, seed=cfg.seed,
                               heldout=cfg.eval.heldout)
  if not items:
    raise config_lib.ConfigError("no held-out items: set data.val_files")
  python = worker_python(cfg.rollout.engine, cfg.rollout.worker_python)
  check_worker_python(python, cfg.rollout.engine)
  sampling = {"max_new_tokens": cfg.rollout.max_response_len, "temperature": cfg.eval.temperature,
              "top_p": cfg.eval.top_p, "top_k": 0}
  with tempfile.TemporaryDirectory() as tmp:
    url = f"file://{tmp}/exchange"
    ex = Exchange(url)
    ex.publish_weights(0, 0, checkpoint)
    workers = LocalWorkers(url, max(1, cfg.rollout.local_workers), cfg.rollout.engine,
                           os.path.join(tmp, "workers"),
                           unsandboxed_code=cfg.rollout.unsandboxed_code, python=python)
    try:
      return evaluate(ex, items, samples=cfg.eval.samples, sampling=sampling, version=0,
                      ks=[int(k) for k in split(str(cfg.eval.pass_k))],
                      timeout_s=cfg.rollout.timeout_s, tag="eval", seed=cfg.seed,
                      on_idle=workers.check)
    finally:
      workers.stop()


def main(argv):
  """`python -m prorl_jax.eval --config=configs/tiny.py --checkpoint=HF_DIR [--out=FILE]`."""
  import json

  from absl import flags

  from prorl_jax.config import ConfigError
  from prorl_jax.rollout.local import WorkerFailure

  del argv
  try:
    result = evaluate_checkpoint(flags.FLAGS.config, flags.FLAGS.checkpoint)
  except (ConfigError, WorkerFailure) as e:
    raise SystemExit(f"error: {e}") from None
  text = json.dumps(result, indent=1)
  print(text)
  if flags.FLAGS.out:
    with open(flags.FLAGS.out, "w") as f:
      f.write(text)


def cli():
  """The `prorl-eval` console script (= python -m prorl_jax.eval)."""
  from absl import app, flags
  from ml_collections import config_flags

  config_flags.DEFINE_config_file("config", None, "config file", lock_config=True)
  flags.DEFINE_string("checkpoint", None, "a HF model directory (e.g. a published version)")
  flags.DEFINE_string("out", "", "also write the JSON here")
  flags.mark_flags_as_required(["config", "checkpoint"])
  app.run(main)


if __name__ == "__main__":
  cli()
