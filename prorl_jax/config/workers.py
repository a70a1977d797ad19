"""The local rollout workers a config asks for: where they go on this host (`layout`, and the
share of accelerator memory that leaves the trainer), and the one place the trainer,
`prorl-eval` and the suite runner turn `rollout.*` into running worker processes (and the
trainer's own inline worker)."""

from __future__ import annotations

import uuid

import jax

from prorl_jax.config import ConfigError, sandbox_limits
from prorl_jax.model.core import param_shardings
from prorl_jax.parallel import dist
from prorl_jax.parallel.sharding import make_mesh
from prorl_jax.rewards.pool import VerifierPool
from prorl_jax.rollout import inline, local
from prorl_jax.rollout import layout as layout_lib
from prorl_jax.rollout.engines.jax_engine import JaxEngine
from prorl_jax.rollout.exchange import Exchange


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


def worker_engine(cfg) -> str:
  """The engine of the config's local worker processes: `rollout.engine`, with `inline` (the
  trainer generates itself) served by JAX workers where any run (an evaluation's, or local
  workers asked for beside the trainer)."""
  return "jax" if cfg.rollout.engine == "inline" else cfg.rollout.engine


def engine_options(cfg) -> dict:
  """The options of the engine `rollout.engine` names (what a worker's --engine_options
  carries): `jax_engine.*` for jax, `vllm.*` for vllm."""
  return vllm_options(cfg) if cfg.rollout.engine == "vllm" else jax_engine_options(cfg)


def jax_engine_options(cfg) -> dict:
  """The JAX engine's options (`rollout.engines.jax_engine.JaxEngine`'s arguments)."""
  j = cfg.jax_engine
  return {
    "batching": j.batching,
    "slots": int(j.slots),
    "page_size": int(j.page_size),
    "pages": int(j.pages),
    "steps_per_sync": int(j.steps_per_sync),
    "attention": j.attention,
    "dtype": j.dtype,
  }


def vllm_options(cfg) -> dict:
  """The vLLM engine's options from the config (`VllmEngine`'s arguments)."""
  v = cfg.vllm
  return {
    "gpu_memory_utilization": float(v.gpu_memory_utilization),
    "tensor_parallel_size": int(v.tensor_parallel),
    "max_num_seqs": int(v.max_num_seqs),
    "enable_prefix_caching": bool(v.prefix_caching),
    "enforce_eager": v.enforce_eager,
  }


def jax_memory_fraction(cfg) -> float | None:
  """The share of accelerator memory the trainer's JAX may take (XLA_PYTHON_CLIENT_MEM_FRACTION):
  `model.memory_fraction` when set; with local vLLM workers on the trainer's GPUs what they
  leave (`rollout.layout`); else None (JAX's default)."""

  try:
    return layout(cfg).trainer_memory
  except layout_lib.LayoutError as e:
    raise ConfigError(str(e)) from None


def layout(cfg, gpus: int | None = None, hosts: int = 1) -> layout_lib.Layout:
  """The layout that a config's rollout, vllm and model.memory_fraction fields ask for on this
  host (`gpus`: its GPU count, default `rollout.layout.visible_gpus()`)."""
  return layout_lib.plan(
    layout_lib.visible_gpus() if gpus is None else gpus,
    cfg.rollout.engine,
    cfg.rollout.local_workers,
    cfg.vllm.tensor_parallel,
    cfg.vllm.gpu_memory_utilization,
    float(cfg.model.memory_fraction) if cfg.model.memory_fraction else None,
    hosts,
  )


def worker_count(cfg) -> int:
  """How many local workers the config starts on this host (rollout.local_workers resolved)."""
  return len(layout(cfg).workers)


def eval_workers(cfg):
  """`evaluation.ServedModel`'s `start_workers` for a config: the local workers it asks for on
  this host, at least one."""

  def start(url: str, log_dir: str, on_death):
    return local_workers(cfg, url, log_dir, on_death, at_least_one=True)[0]

  return start
