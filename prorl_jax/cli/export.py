"""`python -m prorl_jax.cli.export CHECKPOINT OUT [--base=HF_DIR] [--dtype=bfloat16]` (=
`prorl-export`): an Orbax checkpoint step of a run as a Hugging Face directory (safetensors +
config.json + tokenizer) that transformers and vLLM load. The conversion is
`prorl_jax.evaluation.export`."""

from __future__ import annotations

import argparse
import sys

from prorl_jax.cli import errors
from prorl_jax.evaluation.export import ExportError, export


def main(argv=None):
  """The command line of `prorl-export`; returns the exit status (2 with one line for a user
  error)."""
  ap = argparse.ArgumentParser(
    prog="python -m prorl_jax.cli.export", description=__doc__.split("\n\n")[0]
  )
  ap.add_argument("checkpoint", help="RUN_DIR, RUN_DIR/checkpoints or a step directory in it")
  ap.add_argument("out", help="the new Hugging Face directory")
  ap.add_argument(
    "--base",
    default=None,
    help="HF directory the run started from (default: RUN_DIR/config.json's)",
  )
  ap.add_argument("--dtype", default="bfloat16", help="bfloat16 (default), float16 or float32")
  args = ap.parse_args(argv)

  def run() -> int:
    step_dir = export(args.checkpoint, args.out, args.base, args.dtype)
    print(f"wrote {args.out} from {step_dir} ({args.dtype})")
    return 0

  return errors.exit_status(run, ExportError)


if __name__ == "__main__":
  sys.exit(main())
