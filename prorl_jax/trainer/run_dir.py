"""Where a run directory stands: finished (its summary names its last checkpoint), stopped on a
signal to be requeued, or resumable (`preflight.before_loading` reads it); the
exchange as a resumed loop state expects it; the loop state as a checkpoint stores it."""

from __future__ import annotations

import dataclasses
import json
import logging
import os

from prorl_jax.algo import dynamic_sampling
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.trainer.loop_state import LoopState

log = logging.getLogger("prorl_jax.trainer.loop")


STOPPED = "stopped.json"  # in run_dir: the last stop on a signal (a finished run removes it)


SUMMARY = "summary.json"  # in run_dir: written last; a run is finished when it names the last step


def loop_json(loop: LoopState, source, buffer) -> dict:
  """The loop state with the data cursor and carry-over buffer, as a checkpoint stores it."""
  return dataclasses.replace(loop, data=source.state(), buffer=buffer.state()).to_json()


def resume_loop(d: dict, source) -> tuple[LoopState, dynamic_sampling.GroupBuffer]:
  """The loop state of a checkpoint; `source` is moved to its cursor."""
  loop = LoopState.from_json(d)
  source.load_state(loop.data)
  return loop, dynamic_sampling.GroupBuffer.from_state(loop.buffer)


def summarized_step(cfg) -> int | None:
  """The step `RUN_DIR/summary.json` says the run finished at (None: no summary). A run whose
  last checkpoint is at total_steps but has no summary of that step was stopped after its last
  update (before its final validation or its summary): its resumption does those."""
  try:
    with open(os.path.join(cfg.run_dir, SUMMARY)) as f:
      return int(json.load(f)["steps"])
  except (OSError, ValueError, KeyError, TypeError):
    return None


def stopped_before(cfg) -> dict:
  """How the run in `cfg.run_dir` last stopped to be requeued ({} if it did not)."""
  try:
    with open(os.path.join(cfg.run_dir, STOPPED)) as f:
      return json.load(f)
  except (OSError, ValueError):
    return {}


def advice(cfg) -> list[str]:
  """Settings that run but learn less than a close alternative, each with that alternative."""
  out = []
  if cfg.rollout.pipeline and cfg.algo.is_correction == "icepop":
    out.append(
      "rollout.pipeline=True with algo.is_correction=icepop: ICE-POP's band also drops the tokens "
      "the policy moved most between the sampling version and the trained one; "
      "algo.is_correction=tis keeps them with a capped weight and learns more with the pipeline "
      "(docs/algorithm.md, section 8)"
    )
  return out


def finished_line(cfg, step: int) -> str:
  return (
    f"{cfg.run_dir} is finished: step {step} of total_steps={cfg.total_steps}; raise "
    "--config.total_steps to train on"
  )


def exchange_url(cfg) -> str:
  return cfg.rollout.exchange or os.path.join(os.path.abspath(cfg.run_dir), "exchange")


def open_exchange(cfg, loop: LoopState) -> Exchange:
  """The primary's exchange as the loop state `loop` expects it: weights newer than its version
  deleted (published after the checkpoint: redone), the requests of its prefetch record pending
  or with their results (put again where missing or torn), and every other request, lease and
  result of an interrupted run retired (`RequestQueue.reconcile`)."""
  ex = Exchange(exchange_url(cfg))
  for v in ex.weights.versions():
    if v > loop.version:
      ex.weights.delete(v)
  pf = loop.prefetch
  keep = pf is not None and pf.version in ex.weights.versions()
  ex.queue.reconcile(pf.requests if keep else {})
  return ex
