"""The local rollout workers a config asks for: the one place the trainer, `prorl-eval` and the
suite runner turn `rollout.*` into running worker processes."""

from __future__ import annotations

from prorl_jax.config import sandbox_limits, vllm_options
from prorl_jax.rollout import layout, local


def local_workers(
  cfg, url: str, log_dir: str, on_death=None, hosts: int = 1, at_least_one=False, check=True
):
  """The local workers a config asks for on this host, each pinned to the GPUs the layout gives
  it (`rollout.layout.for_config`), or None when it asks for none. `at_least_one`: one unpinned
  worker even then (an evaluation has no other workers); `check`: that their Python can import
  the engine (the trainer checked before loading the model). Returns (workers, layout)."""
  placed = layout.for_config(cfg, hosts=hosts)
  envs = [placed.worker_env(i) for i in range(len(placed.workers))]
  if not envs and at_least_one:
    envs = [{}]
  if not envs:
    return None, placed
  python = local.worker_python(cfg.rollout.engine, cfg.rollout.worker_python)
  if check:
    local.check_worker_python(python, cfg.rollout.engine)
  workers = local.LocalWorkers(
    url,
    len(envs),
    cfg.rollout.engine,
    log_dir,
    unsandboxed_code=cfg.rollout.unsandboxed_code,
    sandbox_limits=sandbox_limits(cfg),
    python=python,
    vllm_options=vllm_options(cfg),
    on_death=on_death,
    envs=envs,
  )
  return workers, placed
