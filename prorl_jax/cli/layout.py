"""`python -m prorl_jax.cli.layout`: where one host's vLLM rollout workers run and how each GPU's
memory is split (`rollout.layout.plan`, the trainer's own planner); `--shell` prints it as bash
assignments for the launchers (`launch/local.sh`, `launch/slurm/train.sbatch`)."""

from __future__ import annotations

import sys

from absl import flags

from prorl_jax.cli.flags import USAGE_EXIT, define_engine, parse
from prorl_jax.config import engines as specs
from prorl_jax.rollout.layout import AUTO, LayoutError, plan, visible_gpus

# the config's names in the planner's errors, said in this command's flag names
CLI_NAMES = {
  "rollout.local_workers": "--workers",
  "vllm.tensor_parallel": "--tensor_parallel",
  "vllm.gpu_memory_utilization": "--vllm_memory",
  "model.memory_fraction": "--trainer_memory",
}

FLAGS = flags.FlagValues()
flags.DEFINE_integer("gpus", None, "GPUs of the host (default: visible)", flag_values=FLAGS)
define_engine(FLAGS, "vllm", "the workers' engine", specs.worker_engines)
flags.DEFINE_integer("tensor_parallel", 1, "GPUs per vLLM engine", flag_values=FLAGS)
flags.DEFINE_string("workers", AUTO, "auto (every GPU generates) or a count", flag_values=FLAGS)
flags.DEFINE_float("vllm_memory", 0.5, "vLLM's gpu_memory_utilization", flag_values=FLAGS)
flags.DEFINE_float("trainer_memory", None, "a fixed JAX memory fraction", flag_values=FLAGS)
flags.DEFINE_bool("dedicated", False, "a rollout node: no trainer on it", flag_values=FLAGS)
flags.DEFINE_bool("shell", False, "print bash assignments on stdout", flag_values=FLAGS)


def main(argv: list[str] | None = None) -> int:
  """The planner's command line; returns the exit status."""
  if (
    parse(FLAGS, argv, prog="python -m prorl_jax.cli.layout", about=__doc__.split("\n\n")[0])
    is None
  ):
    return USAGE_EXIT
  F = FLAGS
  if F.workers != AUTO and not F.workers.isdigit():
    print(f"error: --workers={F.workers}: want auto or a number", file=sys.stderr)
    return USAGE_EXIT
  try:
    got = plan(
      visible_gpus() if F.gpus is None else F.gpus,
      F.engine,
      F.workers,
      F.tensor_parallel,
      F.vllm_memory,
      F.trainer_memory,
      dedicated=F.dedicated,
    )
  except LayoutError as e:
    msg = str(e)
    for key, flag in CLI_NAMES.items():
      msg = msg.replace(key, flag)
    print(f"error: {msg}", file=sys.stderr)
    return USAGE_EXIT
  print(got.describe(), file=sys.stderr)
  for w in got.warnings:
    print(f"warning: {w}", file=sys.stderr)
  if F.shell:
    gpus = " ".join(",".join(map(str, w)) or "-" for w in got.workers)
    print(f"WORKERS={len(got.workers)}")
    print(f"WORKER_GPUS=({gpus})")
    print(f"VLLM_MEMORY={'' if got.vllm_memory is None else got.vllm_memory}")
    print(f"TRAINER_MEMORY={'' if got.trainer_memory is None else got.trainer_memory}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
