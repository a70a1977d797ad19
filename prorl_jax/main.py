"""Entry point: `python -m prorl_jax.main --config=configs/qwen15b.py [--config.algo.x=...]`.

Thin on purpose: flags, logging of the process/device layout, then `loop.run`. A problem the
user can fix ends in one line (exit status 2); `--debug` shows the traceback. A run stopped by
SIGTERM/SIGINT saves a checkpoint and exits 75 (EX_TEMPFAIL): start it again to resume.
"""

if __name__ == "__main__":  # python -m prorl_jax.main: a SIGTERM from here on is kept, not fatal
  from prorl_jax.trainer import preemption

  preemption.install_early()

import functools
import logging
import sys

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

USAGE = """usage: prorl-train --config=FILE[:variant] [--config.<key>=VALUE ...]
  (= python -m prorl_jax.main)

Trains with the ProRL v2 recipe; resumes from RUN_DIR/checkpoints by itself. A run stopped by
SIGTERM/SIGINT saves a checkpoint and exits 75: start it again to resume."""

_CONFIG = config_flags.DEFINE_config_file(
  "config",
  None,
  "config file, e.g. configs/tiny.py or configs/qwen15b.py:smoke; list its "
  "keys with python -m prorl_jax.cli.config --config=FILE",
  lock_config=True,
)
_ACCEPT = flags.DEFINE_boolean(
  "accept_config_changes",
  False,
  "resume a run whose config changed (the differences are "
  "logged and recorded in RUN_DIR/config.json)",
)


def main(argv):
  """The trainer: installs the stop handler, then runs `trainer.loop.run` (whose `start` checks
  the config and sets JAX's memory fraction before JAX's backend starts); exits 75 (requeue)
  when a signal stopped it with a checkpoint saved."""
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}; config fields go as --config.x=...")
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", force=True)
  absl_logging.set_verbosity(absl_logging.WARNING)
  logging.getLogger("absl").setLevel(logging.WARNING)  # orbax logs every save step at INFO
  # lazy throughout main: the SIGTERM handler is installed before any of these
  from prorl_jax import config as config_lib
  from prorl_jax.cli import errors
  from prorl_jax.data import prompts
  from prorl_jax.rollout.local import WorkerFailure
  from prorl_jax.trainer import loop  # imports JAX, starts no backend: `start` sets its memory
  from prorl_jax.trainer.preemption import Watch

  c = _CONFIG.value.checkpoint  # a stop asked from here on is kept (saved at the first safe point)
  watch = Watch(c.on_signal, c.preempt_file, c.grace_s)
  user = (config_lib.ConfigError, prompts.DataError, WorkerFailure)
  with errors.user_errors(*user):
    summary = loop.run(_CONFIG.value, accept_config_changes=_ACCEPT.value, watch=watch)
  if summary.get("stopped_at") is not None:  # stopped on a signal, checkpoint saved: requeue me
    from prorl_jax.trainer.preemption import REQUEUE_EXIT  # lazy: see above

    sys.exit(REQUEUE_EXIT)


def cli():
  """The `prorl-train` console script."""
  from prorl_jax.cli import errors as cli_lib  # lazy: see main

  flags.mark_flags_as_required(["config"])
  app.run(main, flags_parser=functools.partial(cli_lib.parse_flags, usage=USAGE))


if __name__ == "__main__":
  cli()
