"""Where the local rollout workers run: the GPUs of this machine split among vLLM engines so that
every GPU both trains (the trainer's mesh spans them all) and generates (one engine per
`vllm.tensor_parallel` GPUs), with the memory of each GPU split between the two.

`plan` is pure (a device count in, an assignment out) so that a layout can be checked for any
machine; `visible_gpus` counts this machine's NVIDIA GPUs without initialising any framework.
The launchers place their workers with the same planner, through its command line:

  python -m prorl_jax.cli.layout --shell [--gpus=N] [--tensor_parallel=T] [--workers=auto|K]
      [--vllm_memory=F] [--trainer_memory=F] [--dedicated]

prints `WORKERS=`, `WORKER_GPUS=(...)`, `VLLM_MEMORY=` and `TRAINER_MEMORY=` for bash to eval,
and the layout and its warnings on stderr (`--dedicated`: a rollout node, no trainer on it).
It needs nothing but the standard library, so a launcher can run it with any Python 3.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import subprocess

from prorl_jax.config import engines as specs

AUTO = "auto"
HEADROOM = 0.05  # of each GPU left to neither (CUDA context, fragmentation)


class LayoutError(ValueError):
  """A layout that cannot be placed on the devices; one line that says what to change."""


@dataclasses.dataclass(frozen=True)
class Layout:
  """Where one host's local rollout workers run: the GPUs of each worker, vLLM's and the
  trainer's memory fractions on a shared GPU, and warnings for devices left idle."""

  gpus: int  # NVIDIA GPUs visible on this host (0: vLLM's CPU build, or the JAX engine)
  workers: tuple[tuple[int, ...], ...]  # the GPUs of each local worker (empty on CPUs)
  vllm_memory: float | None  # vLLM's gpu_memory_utilization on each GPU it uses
  trainer_memory: float | None  # the trainer's JAX memory fraction (None: JAX's default)
  warnings: tuple[str, ...] = ()

  def worker_env(self, i: int) -> dict[str, str]:
    """The environment that pins worker `i` to its GPUs."""
    if not self.workers[i]:
      return {}
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in self.workers[i])}

  def describe(self) -> str:
    """One line for the start-up log: how many workers, on which GPUs, with what memory split."""
    if not self.workers:
      return "layout: no local rollout workers (external workers only)"
    used = sorted({g for w in self.workers for g in w})
    if not used:  # the JAX engine, or vLLM's CPU build: nothing pinned
      where = "on the CPU" if not self.gpus else "beside the trainer, not pinned to a GPU"
      return f"layout: {len(self.workers)} local rollout worker(s) {where}"
    per = ", ".join(f"worker {i}: GPU {','.join(map(str, w))}" for i, w in enumerate(self.workers))
    if self.trainer_memory is None:  # pinned, and no trainer share: a rollout node (dedicated)
      return (
        f"layout: no trainer; {len(self.workers)} vLLM worker(s) on {len(used)} of {self.gpus} "
        f"GPU(s) (gpu_memory_utilization {self.vllm_memory}): {per}"
      )
    return (
      f"layout: the trainer on GPUs 0-{self.gpus - 1} (JAX memory fraction "
      f"{self.trainer_memory}); {len(self.workers)} vLLM worker(s) on {len(used)} GPU(s) "
      f"(gpu_memory_utilization {self.vllm_memory}): {per}"
    )


def plan(
  gpus: int,
  engine: str,
  workers: str | int = AUTO,
  tensor_parallel: int = 1,
  vllm_memory: float = 0.5,
  trainer_memory: float | None = None,
  hosts: int = 1,
  dedicated: bool = False,
) -> Layout:
  """The layout of the primary host's local workers. `workers`: "auto" (one engine per
  `tensor_parallel` GPUs, every GPU generating; one worker where there is no GPU or the engine
  is JAX; none for `inline`, where the trainer generates), or a count. `trainer_memory`: a
  fixed JAX fraction (model.memory_fraction), else what vLLM leaves. `hosts`: trainer hosts;
  only the first starts local workers. `dedicated`: a rollout node with no trainer (the engines
  may take all the memory they ask for)."""
  tp = int(tensor_parallel)
  if tp < 1:
    raise LayoutError(f"vllm.tensor_parallel={tp}: want 1 or more GPUs per vLLM engine")
  auto = str(workers) == AUTO
  n = None if auto else int(workers)
  s = specs.spec(engine)
  if not s.places_gpus or gpus == 0:  # the JAX engine, or vLLM's CPU build: no GPUs to place
    count = (0 if s.in_trainer else 1) if auto else n  # inline: the trainer generates
    return Layout(gpus, tuple(() for _ in range(count)), None, trainer_memory)
  if n == 0:  # external workers only: this host's GPUs train, others generate
    return Layout(gpus, (), None, trainer_memory)
  if auto:
    n = gpus // tp
    if n == 0:
      raise LayoutError(
        f"vllm.tensor_parallel={tp} needs {tp} GPUs for one vLLM engine, this host has {gpus}: "
        "lower vllm.tensor_parallel"
      )
  if n * tp > gpus:
    raise LayoutError(
      f"rollout.local_workers={n} x vllm.tensor_parallel={tp} needs {n * tp} GPUs, this host "
      f"has {gpus}: lower one of them, or set rollout.local_workers=auto"
    )
  warnings = []
  idle = gpus - n * tp
  if idle:
    warnings.append(
      f"{idle} of this host's {gpus} GPUs generate nothing (rollout.local_workers={n} x "
      f"vllm.tensor_parallel={tp}); rollout.local_workers=auto uses {gpus // tp} workers"
    )
  if hosts > 1 and not dedicated:
    warnings.append(
      f"only the first of the {hosts} trainer hosts starts local workers: the GPUs of the "
      "others train and do not generate; start workers beside them (launch/slurm/train.sbatch "
      "WORKER_NODES, or rollout.external_workers)"
    )
  if dedicated:
    if not 0.0 < vllm_memory <= 1.0:
      raise LayoutError(f"vllm.gpu_memory_utilization={vllm_memory}: want a fraction in (0, 1]")
    memory = None
  else:
    memory = trainer_share(n, vllm_memory, trainer_memory)
  placed = tuple(tuple(range(i * tp, (i + 1) * tp)) for i in range(n))
  return Layout(gpus, placed, float(vllm_memory) if n else None, memory, tuple(warnings))


def trainer_share(engines_here: int, vllm_memory: float, trainer_memory: float | None):
  """The fraction of each GPU the trainer's JAX gets (None: all of it), the one rule the run's
  layout and the compile tool's fit report both use: model.memory_fraction when set; else, where
  this host's GPUs also run vLLM engines, what vLLM leaves less HEADROOM; else all of it (a
  trainer-only node, `rollout.local_workers=0`)."""
  if not engines_here:
    return trainer_memory
  if trainer_memory is None:
    memory = round(1.0 - vllm_memory - HEADROOM, 3)
    if memory < 0.1:
      raise LayoutError(
        f"vllm.gpu_memory_utilization={vllm_memory} leaves the trainer {max(memory, 0):.0%} of "
        "each GPU; lower it (the trainer and a vLLM engine share every GPU)"
      )
    return memory
  if trainer_memory + vllm_memory > 1.0:
    raise LayoutError(
      f"model.memory_fraction={trainer_memory} + vllm.gpu_memory_utilization={vllm_memory} > 1: "
      "the trainer and a vLLM engine share every GPU; lower one of them"
    )
  return trainer_memory


@functools.cache
def visible_gpus() -> int:
  """NVIDIA GPUs this process may use: CUDA_VISIBLE_DEVICES when set, else `nvidia-smi -L`."""
  env = os.environ.get("CUDA_VISIBLE_DEVICES")
  if env is not None:
    return len([d for d in env.split(",") if d.strip() and d.strip() != "-1"])
  if not shutil.which("nvidia-smi"):
    return 0
  try:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
  except (OSError, subprocess.TimeoutExpired):
    return 0
  return (
    sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if not out.returncode else 0
  )
