"""`python -m prorl_jax.cli.export CHECKPOINT OUT [--base=HF_DIR] [--dtype=bfloat16] [--adapter]`
(= `prorl-export`): an Orbax checkpoint step of a run as a Hugging Face directory (safetensors +
config.json + tokenizer) that transformers and vLLM load; a LoRA run's adapters merged into its
base, or with --adapter as a PEFT adapter directory. The conversion is
`prorl_jax.evaluation.export`."""

from __future__ import annotations

import sys

from absl import flags

from prorl_jax.cli import errors
from prorl_jax.cli.flags import USAGE_EXIT, parse
from prorl_jax.evaluation.export import ExportError, export

FLAGS = flags.FlagValues()
flags.DEFINE_string(
  "base",
  None,
  "HF directory the run started from (default: RUN_DIR/config.json's)",
  flag_values=FLAGS,
)
flags.DEFINE_enum(
  "dtype", "bfloat16", ["bfloat16", "float16", "float32"], "the weights' dtype", flag_values=FLAGS
)
flags.DEFINE_bool(
  "adapter",
  False,
  "a LoRA run's adapters as a PEFT adapter directory (default: merged into the base)",
  flag_values=FLAGS,
)


def main(argv=None) -> int:
  """The command line of `prorl-export`; returns the exit status (2 with one line for a user
  error)."""
  args = parse(
    FLAGS,
    argv,
    prog="python -m prorl_jax.cli.export",
    about=__doc__.split("\n\n")[0],
    args="CHECKPOINT OUT",
  )
  if args is None:
    return USAGE_EXIT

  def run() -> int:
    if len(args) != 2:
      raise ExportError(
        f"want CHECKPOINT (RUN_DIR, RUN_DIR/checkpoints or a step directory in it) and OUT (the "
        f"new Hugging Face directory), got {len(args)} arguments"
      )
    checkpoint, out = args
    step_dir = export(checkpoint, out, FLAGS.base, FLAGS.dtype, adapter=FLAGS.adapter)
    what = "a PEFT adapter" if FLAGS.adapter else FLAGS.dtype
    print(f"wrote {out} from {step_dir} ({what})")
    return 0

  return errors.exit_status(run, ExportError)


if __name__ == "__main__":
  sys.exit(main())
