"""The one place the trainer, `prorl-eval` and the suite runner turn a config's `rollout.*` into
running worker processes (`placement` says where), and the trainer's own inline worker."""

from __future__ import annotations

import os
import sys
import uuid

import jax

from prorl_jax.config import sandbox_limits
from prorl_jax.model.core import param_shardings
from prorl_jax.parallel import dist
from prorl_jax.parallel.sharding import make_mesh
from prorl_jax.rewards.pool import VerifierPool
from prorl_jax.rollout import inline, local
from prorl_jax.rollout.engines.jax_engine import JaxEngine
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.trainer.placement import engine_options, jax_engine_options, layout, worker_engine


def local_workers(
  cfg, url: str, log_dir: str, on_death=None, hosts: int = 1, at_least_one=False, check=True
):
  """The local workers a config asks for on this host, each pinned to the GPUs the layout gives
  it (`config.layout`), or None when it asks for none. `at_least_one`: one unpinned
  worker even then (an evaluation has no other workers); `check`: that their Python can import
  the engine (the trainer checked before loading the model). Returns (workers, layout)."""
  placed = layout(cfg, hosts=hosts)
  envs = [placed.worker_env(i) for i in range(len(placed.workers))]
  if not envs and at_least_one:
    envs = [{}]
  if not envs:
    return None, placed
  engine = worker_engine(cfg)
  python = local.worker_python(engine, cfg.rollout.worker_python)
  if check:
    local.check_worker_python(python, engine)
  workers = local.LocalWorkers(
    url,
    len(envs),
    engine,
    log_dir,
    unsandboxed_code=cfg.rollout.unsandboxed_code,
    sandbox_limits=sandbox_limits(cfg),
    python=python,
    engine_options=engine_options(cfg),
    inflight_updates=cfg.rollout.inflight_updates,
    verifier_processes=int(cfg.rollout.verifier_processes),
    on_death=on_death,
    envs=envs,
  )
  return workers, placed


def inline_worker(cfg, ex, url: str, tokenizer_dir: str, model_cfg):
  """This trainer process's inline worker (`rollout/inline.py`; `inline.close` closes its
  verifier pool) when `rollout.engine=inline`, else None: the primary's on its exchange `ex`; in
  a multi-host run every other process's too, on its own view of the exchange at `url`, with a
  replica of each version on its local devices."""
  if cfg.rollout.engine != "inline":
    return None
  options = {}
  if dist.multi():
    local = make_mesh(1, -1, 1, jax.local_devices())
    options = dict(
      worker_id=f"inline-p{jax.process_index()}",
      local_shardings=param_shardings(model_cfg, local),
      session=dist.broadcast(uuid.uuid4().hex[:12] if dist.is_primary() else None),
    )
  limits = sandbox_limits(cfg)
  return inline.InlineWorker(
    ex or Exchange(url),
    JaxEngine(**jax_engine_options(cfg)),
    tokenizer_dir,
    model_cfg,
    cfg.model.compute_dtype,
    VerifierPool(
      int(cfg.rollout.verifier_processes),
      unsandboxed_code=cfg.rollout.unsandboxed_code,
      sandbox_memory_bytes=limits["memory_bytes"],
      sandbox_pids=limits["pids"],
    ),
    **options,
  )


def eval_workers(cfg):
  """`evaluation.ServedModel`'s `start_workers` for a config: the local workers it asks for on
  this host, at least one."""

  def start(url: str, log_dir: str, on_death):
    return local_workers(cfg, url, log_dir, on_death, at_least_one=True)[0]

  return start


class Rollouts:
  """The rollout side of a run, as the loop sees it: the exchange (the primary's; None on the
  other processes), the local worker processes, the trainer's inline worker, and the stop
  requests heeded while the loop waits for results."""

  def __init__(self, ex, workers, inline_worker, watch):
    self.ex, self.workers, self.inline, self.watch = ex, workers, inline_worker, watch

  def on_idle(self) -> str:
    """While the primary waits: stop when asked, generate inline, mind the workers."""
    self.watch.check()
    if self.inline is not None:
      self.inline.serve()
    return self.workers.check() if self.workers else ""

  @property
  def restarts(self) -> int | None:
    return self.workers.restarts if self.workers else None

  def close(self) -> None:
    if self.workers:
      self.workers.stop()
    inline.close(self.inline)


def open_rollouts(cfg, ex, url: str, setup, watch) -> Rollouts:
  """The run's rollout side before its workers start: the exchange and the inline worker (a stop
  asked mid-request abandons its request)."""
  own = inline_worker(cfg, ex, url, setup.path, setup.model_cfg)
  if own is not None and dist.is_primary():
    own.interrupt = watch.check
  return Rollouts(ex, None, own, watch)


def start_local_workers(cfg, rollouts: Rollouts, url: str) -> None:
  """The primary's local workers of the layout (said on the console with its warnings), started
  once the run's weights are published."""
  if not dist.is_primary():
    return
  placed = layout(cfg, hosts=jax.process_count())
  print(placed.describe(), flush=True)
  for line in placed.warnings:
    print(f"warning: {line}", file=sys.stderr, flush=True)
  log_dir = os.path.join(cfg.run_dir, "workers")
  rollouts.workers, _ = local_workers(
    cfg, url, log_dir, rollouts.ex.queue.release, hosts=jax.process_count(), check=False
  )
