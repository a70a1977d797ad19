"""One descriptor per rollout engine: everything the rest of the project asks about an engine
(which module builds it, its config section, the Python it runs in, whether it places GPUs, how
it takes new weights). Read by the layout, the local workers, the placement, the fit report and
the CLIs; no other module tests an engine's name. Adding an engine is its module and one row here.

Imports nothing: the config's validation, the trainer, the workers and vLLM's environment all
read it.
"""

from __future__ import annotations

import dataclasses

_JAX_FIX = "install the project's requirements (`make venv`) or set rollout.worker_python"


@dataclasses.dataclass(frozen=True)
class EngineSpec:
  """An engine's row; the defaults describe a JAX engine in the trainer's own Python."""

  name: str
  worker_engine: str  # the engine local workers run when any start (an evaluation's)
  module: str = ""  # the module of its `Engine` class ("" for one the trainer runs in itself)
  cls: str = ""  # that class
  options_section: str = "jax_engine"  # the config section of its options
  import_name: str = "jax"  # what a worker's Python must import to run it
  own_python: bool = False  # its workers run in the project's vLLM environment
  places_gpus: bool = False  # one worker per `tensor_parallel` GPUs, pinned (CUDA_VISIBLE_DEVICES)
  shares_trainer_gpus: bool = False  # on a GPU host it takes memory beside the trainer
  in_trainer: bool = False  # the trainer generates itself (no worker processes)
  weights: str = "reload"  # how it takes a new version: "reload" (the HF directory) or "in_place"
  swaps_in_flight: bool = False  # loads a new version between decode chunks (continuous batching)
  sized_by_config: bool = True  # its memory holds rollout.max_response_len (vLLM pages instead)
  fix: str = _JAX_FIX  # what to do when a worker's Python cannot import it


ENGINES: dict[str, EngineSpec] = {
  "jax": EngineSpec(
    name="jax",
    worker_engine="jax",
    module="prorl_jax.rollout.engines.jax_engine",
    cls="JaxEngine",
    swaps_in_flight=True,
  ),
  "vllm": EngineSpec(
    name="vllm",
    worker_engine="vllm",
    module="prorl_jax.rollout.engines.vllm",
    cls="VllmEngine",
    options_section="vllm",
    import_name="vllm",
    own_python=True,
    places_gpus=True,
    shares_trainer_gpus=True,
    sized_by_config=False,
    fix=(
      "build the project's vLLM environment with `make venv-vllm` (.venv-vllm: the GPU build "
      "where nvidia-smi lists a GPU, else the CPU one; VLLM=gpu|cpu chooses), or point "
      "rollout.worker_python at the python of an environment with vLLM"
    ),
  ),
  "inline": EngineSpec(
    name="inline",
    worker_engine="jax",
    in_trainer=True,
    weights="in_place",
    fix="install the project's requirements (`make venv`)",
  ),
}
NAMES = tuple(ENGINES)


def worker_engines() -> tuple[str, ...]:
  """The engines a worker process can run (`python -m prorl_jax.cli.worker --engine=...`), read
  from the table as it stands."""
  return tuple(n for n, s in ENGINES.items() if not s.in_trainer)


WORKER_ENGINES = worker_engines()  # the table's own rows


def spec(name: str) -> EngineSpec:
  """The descriptor of engine `name`; ValueError (one line) for an unknown one."""
  try:
    return ENGINES[name]
  except KeyError:
    raise ValueError(f"unknown engine {name!r}; use {', '.join(ENGINES)}") from None
