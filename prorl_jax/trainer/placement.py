"""Where a config's local rollout workers go on this host and what they run: the layout
(`rollout.layout`), the share of accelerator memory that leaves the trainer, the engine and its
options. Imports no JAX: `start` reads the memory fraction here before JAX's backend starts."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping

from prorl_jax.config import ConfigError, sandbox_limits
from prorl_jax.config import engines as specs
from prorl_jax.rollout import layout as layout_lib
from prorl_jax.rollout.local import worker_python


@dataclasses.dataclass(frozen=True)
class WorkersPlan:
  """A config's rollout workers on this host, placed once (`workers_plan`): where each local
  worker runs (the layout), the engine and options they run, their Python, and how they score
  (verifier processes, the code sandboxes' limits). The trainer's inline worker runs the same
  engine options and scores the same way."""

  layout: layout_lib.Layout
  engine: str  # of the local worker processes (`worker_engine`)
  options: Mapping  # the engine's options (`engine_options`)
  python: str  # the local workers' interpreter
  inflight_updates: bool
  verifier_processes: int
  unsandboxed_code: bool
  sandbox_limits: Mapping  # {"memory_bytes", "pids"}: all code sandboxes of a process together
  # how the trainer shares a GPU with local vLLM engines: vllm.gpu_memory_utilization, whether
  # a node of the run runs any (rollout.local_workers not 0) and model.memory_fraction
  vllm_memory: float
  engines_here: bool
  memory_fraction: float | None

  @property
  def count(self) -> int:
    """The local worker processes this host starts."""
    return len(self.layout.workers)

  def trainer_share(self) -> float | None:
    """The share of a GPU the trainer gets on a node of the run whose GPUs vLLM shares (None:
    all of it): the layout's own rule (`layout.trainer_share`), for any node, not only this
    host (the compile tool's target); a share that leaves the trainer too little is one line."""
    try:
      return layout_lib.trainer_share(
        int(self.engines_here), self.vllm_memory, self.memory_fraction
      )
    except layout_lib.LayoutError as e:
      raise ConfigError(str(e)) from None


def workers_plan(cfg, hosts: int = 1, gpus: int | None = None) -> WorkersPlan:
  """The config's `WorkersPlan` on this host (`hosts`: the trainer's; `gpus`: this host's
  count, default the visible GPUs)."""
  try:
    placed = layout(cfg, gpus, hosts)
  except layout_lib.LayoutError as e:
    raise ConfigError(str(e)) from None
  engine = worker_engine(cfg)
  r = cfg.rollout
  return WorkersPlan(
    layout=placed,
    engine=engine,
    options=types.MappingProxyType(engine_options(cfg)),
    python=worker_python(engine, r.worker_python),
    inflight_updates=bool(r.inflight_updates),
    verifier_processes=int(r.verifier_processes),
    unsandboxed_code=bool(r.unsandboxed_code),
    sandbox_limits=types.MappingProxyType(sandbox_limits(cfg)),
    vllm_memory=float(cfg.vllm.gpu_memory_utilization),
    engines_here=str(r.local_workers) != "0",
    memory_fraction=float(cfg.model.memory_fraction) or None,
  )


def worker_engine(cfg) -> str:
  """The engine of the config's local worker processes: `rollout.engine`, with `inline` (the
  trainer generates itself) served by JAX workers where any run (an evaluation's, or local
  workers asked for beside the trainer)."""
  return specs.spec(cfg.rollout.engine).worker_engine


def engine_options(cfg) -> dict:
  """The options of the engine `rollout.engine` names (what a worker's --engine_options
  carries): `jax_engine.*` for jax, `vllm.*` for vllm."""
  section = specs.spec(cfg.rollout.engine).options_section
  return {"vllm": vllm_options, "jax_engine": jax_engine_options}[section](cfg)


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
    "lora": v.lora,
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
