"""Where a run directory stands: finished (its summary names its last checkpoint), stopped on a
signal to be requeued, or resumable; the checks a primary makes before loading anything; the
exchange as a resumed loop state expects it; the loop state as a checkpoint stores it."""

from __future__ import annotations

import dataclasses
import json
import logging
import os

import jax

from prorl_jax import config as config_lib
from prorl_jax.algo import dynamic_sampling
from prorl_jax.data.sources import precheck
from prorl_jax.evaluation.export import RUN_RECORD
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.rollout.local import check_worker_python, worker_python
from prorl_jax.rollout.store import InvalidExchange, open_store
from prorl_jax.trainer import placement
from prorl_jax.trainer import setup as setup_lib
from prorl_jax.trainer.loop_state import LoopState
from prorl_jax.trainer.plan import data_spec
from prorl_jax.trainer.run_record import check_resume_config, latest_local_step
from prorl_jax.trainer.setup import resolve_model_path

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


def check_before_loading(cfg, accept_config_changes: bool):
  """The primary's checks before any heavy work: (summary of a finished run or None, the config
  changes a resumed run accepts)."""
  log.info("run %s: its config goes to %s", cfg.run_dir, os.path.join(cfg.run_dir, RUN_RECORD))
  for line in advice(cfg):
    log.warning(line)
  changes = check_resume_config(cfg, accept_config_changes)
  last = latest_local_step(cfg)
  stop = stopped_before(cfg)  # stopped before the last step's validation: not finished
  pending = bool(stop.get("pending_tail")) and stop.get("stopped_at") == last
  done = last is not None and last >= cfg.total_steps and summarized_step(cfg) == last
  if done and jax.process_count() == 1 and not pending:
    print(finished_line(cfg, last), flush=True)
    return {"finished": True, "steps": last}, changes
  setup_lib.check_model_path(cfg)  # is the model there, and are the data files and rows?
  precheck(data_spec(cfg))
  try:  # ... and can the exchange be opened?
    open_store(exchange_url(cfg))
  except InvalidExchange as e:
    raise config_lib.ConfigError(f"rollout.exchange: {e}") from None
  if placement.worker_count(cfg):  # can the workers run at all?
    engine = placement.worker_engine(cfg)
    check_worker_python(worker_python(engine, cfg.rollout.worker_python), engine)
  resolve_model_path(cfg)  # the demo's base model is built once, by the primary
  return None, changes


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
