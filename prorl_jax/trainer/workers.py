"""The one place the trainer, `prorl-eval` and the suite runner turn a config's `rollout.*` into
running worker processes (`placement` says where), and the trainer's own inline worker."""

from __future__ import annotations

import os
import sys
import uuid

import jax

from prorl_jax.model.core import param_shardings
from prorl_jax.parallel import dist
from prorl_jax.parallel.sharding import make_mesh
from prorl_jax.rewards.pool import VerifierPool
from prorl_jax.rollout import inline, local
from prorl_jax.rollout.engines.jax_engine import JaxEngine
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.trainer.placement import WorkersPlan


def local_workers(
  wp: WorkersPlan, url: str, log_dir: str, on_death=None, at_least_one=False, check=True
):
  """The local workers of `wp` on this host, each pinned to the GPUs its layout gives it, or
  None when it places none. `at_least_one`: one unpinned worker even then (an evaluation has no
  other workers); `check`: that their Python can import the engine (the trainer checked before
  loading the model)."""
  envs = [wp.layout.worker_env(i) for i in range(wp.count)]
  if not envs and at_least_one:
    envs = [{}]
  if not envs:
    return None
  if check:
    local.check_worker_python(wp.python, wp.engine)
  return local.LocalWorkers(
    url,
    len(envs),
    wp.engine,
    log_dir,
    unsandboxed_code=wp.unsandboxed_code,
    sandbox_limits=dict(wp.sandbox_limits),
    python=wp.python,
    engine_options=dict(wp.options),
    inflight_updates=wp.inflight_updates,
    verifier_processes=wp.verifier_processes,
    on_death=on_death,
    envs=envs,
  )


def verifier_pool(wp: WorkersPlan) -> VerifierPool:
  """A verifier pool that scores as `wp`'s workers do."""
  return VerifierPool(
    wp.verifier_processes,
    unsandboxed_code=wp.unsandboxed_code,
    sandbox_memory_bytes=wp.sandbox_limits["memory_bytes"],
    sandbox_pids=wp.sandbox_limits["pids"],
  )


def inline_worker(plan, ex, url: str, tokenizer_dir: str, model_cfg):
  """This trainer process's inline worker (`rollout/inline.py`; `inline.close` closes its
  verifier pool) when the plan's engine is `inline`, else None: the primary's on its exchange
  `ex`; in a multi-host run every other process's too, on its own view of the exchange at `url`,
  with a replica of each version on its local devices."""
  if not plan.rollout.engine_spec.in_trainer:
    return None
  options = {}
  if dist.multi():
    local_mesh = make_mesh(1, -1, 1, jax.local_devices())
    options = dict(
      worker_id=f"inline-p{jax.process_index()}",
      local_shardings=param_shardings(model_cfg, local_mesh),
      session=dist.broadcast(uuid.uuid4().hex[:12] if dist.is_primary() else None),
    )
  return inline.InlineWorker(
    ex or Exchange(url),
    JaxEngine(**plan.workers.options),
    tokenizer_dir,
    model_cfg,
    plan.compute_dtype,
    verifier_pool(plan.workers),
    **options,
  )


def eval_workers(wp: WorkersPlan):
  """`evaluation.ServedModel`'s `start_workers` for a config's placed workers `wp`
  (`placement.workers_plan`): the local workers it asks for on this host, at least one."""

  def start(url: str, log_dir: str, on_death):
    return local_workers(wp, url, log_dir, on_death, at_least_one=True)

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


def open_rollouts(ex, url: str, setup, watch) -> Rollouts:
  """The run's rollout side before its workers start: the exchange and the inline worker (a stop
  asked mid-request abandons its request)."""
  own = inline_worker(setup.plan, ex, url, setup.path, setup.model_cfg)
  if own is not None and dist.is_primary():
    own.interrupt = watch.check
  return Rollouts(ex, None, own, watch)


def start_local_workers(plan, rollouts: Rollouts, url: str) -> None:
  """The primary's local workers of the plan's layout (said on the console with its warnings),
  started once the run's weights are published."""
  if not dist.is_primary():
    return
  placed = plan.workers.layout
  print(placed.describe(), flush=True)
  for line in placed.warnings:
    print(f"warning: {line}", file=sys.stderr, flush=True)
  log_dir = os.path.join(plan.run_dir, "workers")
  rollouts.workers = local_workers(
    plan.workers, url, log_dir, rollouts.ex.queue.release, check=False
  )
