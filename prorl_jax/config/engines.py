"""One descriptor per rollout engine: everything the rest of the project asks about an engine
(which module builds it, its config section, the Python it runs in, whether it places GPUs, how
it takes new weights). Read by the layout, the local workers, the placement, the fit report and
the CLIs; no other module tests an engine's name. Adding an engine is its module and one row here.

Imports nothing: the config's validation, the trainer, the workers and vLLM's environment all
read it.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class EngineSpec:
  name: str
  module: str  # the module of its `Engine` class ("" for an engine the trainer runs in itself)
  cls: str  # that class
  options_section: str  # the config section of its options (`vllm`, `jax_engine`)
  import_name: str  # what a worker's Python must import to run it
  own_python: bool  # its workers run in the project's vLLM environment, not the trainer's
  places_gpus: bool  # one worker per `tensor_parallel` GPUs, pinned (CUDA_VISIBLE_DEVICES)
  shares_trainer_gpus: bool  # on a GPU host it takes memory beside the trainer (its fraction)
  in_trainer: bool  # the trainer generates itself (no worker processes)
  worker_engine: str  # the engine local workers run when any start (an evaluation's)
  weights: str  # how it takes a new version: "reload" (load the HF directory) or "in_place"
  swaps_in_flight: bool  # can load a new version between decode chunks (with continuous batching)
  sized_by_config: (
    bool  # its memory holds rollout.max_response_len (vLLM pages what the model allows)
  )
  fix: str  # what to do when a worker's Python cannot import it


ENGINES: dict[str, EngineSpec] = {
  "jax": EngineSpec(
    name="jax",
    module="prorl_jax.rollout.engines.jax_engine",
    cls="JaxEngine",
    options_section="jax_engine",
    import_name="jax",
    own_python=False,
    places_gpus=False,
    shares_trainer_gpus=False,
    in_trainer=False,
    worker_engine="jax",
    weights="reload",
    swaps_in_flight=True,
    sized_by_config=True,
    fix="install the project's requirements (`make venv`) or set rollout.worker_python",
  ),
  "vllm": EngineSpec(
    name="vllm",
    module="prorl_jax.rollout.engines.vllm",
    cls="VllmEngine",
    options_section="vllm",
    import_name="vllm",
    own_python=True,
    places_gpus=True,
    shares_trainer_gpus=True,
    in_trainer=False,
    worker_engine="vllm",
    weights="reload",
    swaps_in_flight=False,
    sized_by_config=False,
    fix=(
      "build the project's vLLM environment with `make venv-vllm` (.venv-vllm: the GPU build "
      "where nvidia-smi lists a GPU, else the CPU one; VLLM=gpu|cpu chooses), or point "
      "rollout.worker_python at the python of an environment with vLLM"
    ),
  ),
  "inline": EngineSpec(
    name="inline",
    module="",
    cls="",
    options_section="jax_engine",
    import_name="jax",
    own_python=False,
    places_gpus=False,
    shares_trainer_gpus=False,
    in_trainer=True,
    worker_engine="jax",
    weights="in_place",
    swaps_in_flight=False,
    sized_by_config=True,
    fix="install the project's requirements (`make venv`)",
  ),
}
NAMES = tuple(ENGINES)
# the engines a worker process can run (`python -m prorl_jax.cli.worker --engine=...`)
WORKER_ENGINES = tuple(n for n, s in ENGINES.items() if not s.in_trainer)


def spec(name: str) -> EngineSpec:
  """The descriptor of engine `name`; ValueError (one line) for an unknown one."""
  try:
    return ENGINES[name]
  except KeyError:
    raise ValueError(f"unknown engine {name!r}; use {', '.join(ENGINES)}") from None
