"""The engine/trainer probe: a few fixed sequences published with every weight version beside
the trainer's log-probs of them; a worker scores the same tokens with its engine after loading the
version and reports the difference with its results, and the trainer stops a run whose workers
drift past `rollout.max_probe_mismatch`.

write (trainer) -> `PROBE_FILE` in the version's directory -> read + check (worker) ->
`probe_mismatch` in the result manifest -> `reported_mismatch` (trainer). No jax here: workers
import this in vLLM's environment; the trainer passes its jitted log-prob function in.
"""

from __future__ import annotations

import json
import os

import numpy as np

from prorl_jax.records import Result
from prorl_jax.rollout.local import WorkerFailure

PROBE_FILE = "probe.json"
RELOAD_TOLERANCE = 0.05  # max |engine − trainer| log-prob on the probe after an in-place reload


def write_probe(logprobs_fn, tokens: list[list[int]], path: str) -> None:
  """`path`/probe.json: the sequences and the trainer's log-prob (T=1) of each token after the
  first. `logprobs_fn(tokens_BxT)` gives log-softmax [B, T, V]; rows are right-padded (causal,
  so padding changes no kept log-prob)."""
  width = max(len(t) for t in tokens)
  padded = np.zeros((len(tokens), width), np.int32)
  for i, t in enumerate(tokens):
    padded[i, : len(t)] = t
  lp = np.asarray(logprobs_fn(padded))
  out = [lp[i, np.arange(len(t) - 1), t[1:]].tolist() for i, t in enumerate(tokens)]
  with open(os.path.join(path, PROBE_FILE), "w") as f:
    json.dump({"tokens": tokens, "logprobs": out}, f)


def read_probe(path: str) -> dict | None:
  f = os.path.join(path, PROBE_FILE)
  if not os.path.isfile(f):
    return None
  with open(f) as fh:
    return json.load(fh)


def probe_mismatch(engine_logp, trainer_logp) -> dict:
  d = np.abs(np.asarray(engine_logp, np.float64) - np.asarray(trainer_logp, np.float64))
  return {"max": float(d.max()) if d.size else 0.0, "mean": float(d.mean()) if d.size else 0.0}


def check_probe(score_tokens, path: str) -> dict | None:
  """|engine − trainer| log-prob on the version's probe (`score_tokens(seq)` gives the engine's
  log-probs of seq[1:]); None when the version has no probe."""
  probe = read_probe(path)
  if probe is None:
    return None
  got = np.concatenate([score_tokens(seq) for seq in probe["tokens"]])
  return probe_mismatch(got, np.concatenate([np.asarray(x) for x in probe["logprobs"]]))


def reported_mismatch(result: Result, budget: float) -> dict:
  """A result's probe mismatch ({max, mean}; {} when its worker reported none); past `budget`
  (> 0) the run stops with one line (WorkerFailure)."""
  mm = result.probe_mismatch or {}
  if mm and budget and mm["max"] > budget:
    raise WorkerFailure(
      f"engine/trainer log-prob mismatch {mm['max']:.3g} on the probe exceeds "
      f"rollout.max_probe_mismatch={budget} (worker {result.worker}, weights "
      f"v{result.policy_version}); check the engine's dtype and weight loading"
    )
  return mm
