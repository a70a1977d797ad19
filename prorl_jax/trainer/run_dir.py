"""Where a run directory stands: finished (its summary names its last checkpoint), stopped on a
signal to be requeued, or resumable (`preflight.before_loading` reads it); and the exchange as a
resumed loop state expects it."""

from __future__ import annotations

import json
import os

from prorl_jax.rollout.exchange import Exchange
from prorl_jax.trainer.loop_state import LoopState

STOPPED = "stopped.json"  # in run_dir: the last stop on a signal (a finished run removes it)


SUMMARY = "summary.json"  # in run_dir: written last; a run is finished when it names the last step


def summarized_step(run_dir: str) -> int | None:
  """The step `RUN_DIR/summary.json` says the run finished at (None: no summary). A run whose
  last checkpoint is at total_steps but has no summary of that step was stopped after its last
  update (before its final validation or its summary): its resumption does those."""
  try:
    with open(os.path.join(run_dir, SUMMARY)) as f:
      return int(json.load(f)["steps"])
  except (OSError, ValueError, KeyError, TypeError):
    return None


def stopped_before(run_dir: str) -> dict:
  """How the run in `run_dir` last stopped to be requeued ({} if it did not)."""
  try:
    with open(os.path.join(run_dir, STOPPED)) as f:
      return json.load(f)
  except (OSError, ValueError):
    return {}


def finished_line(run_dir: str, step: int, total_steps: int) -> str:
  return (
    f"{run_dir} is finished: step {step} of total_steps={total_steps}; raise "
    "--config.total_steps to train on"
  )


def exchange_url(exchange: str, run_dir: str) -> str:
  """The exchange of a run: `rollout.exchange`, or RUN_DIR/exchange when that is empty."""
  return exchange or os.path.join(os.path.abspath(run_dir), "exchange")


def open_exchange(url: str, loop: LoopState) -> Exchange:
  """The primary's exchange as the loop state `loop` expects it: weights newer than its version
  deleted (published after the checkpoint: redone), the requests of its prefetch record pending
  or with their results (put again where missing or torn), and every other request, lease and
  result of an interrupted run retired (`RequestQueue.reconcile`)."""
  ex = Exchange(url)
  for v in ex.weights.versions():
    if v > loop.version:
      ex.weights.delete(v)
  pf = loop.prefetch
  keep = pf is not None and pf.version in ex.weights.versions()
  ex.queue.reconcile(pf.requests if keep else {})
  return ex
