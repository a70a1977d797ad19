"""Entry point: `python -m prorl_jax.main --config=configs/qwen15b.py [--config.algo.x=...]`.

Thin on purpose: flags, logging of the process/device layout, then `train.run`.
"""

import logging

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file, e.g. configs/tiny.py",
                                          lock_config=True)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}; config fields go as --config.x=...")
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", force=True)
  absl_logging.set_verbosity(absl_logging.WARNING)
  logging.getLogger("absl").setLevel(logging.WARNING)  # orbax logs every save step at INFO
  import jax

  from prorl_jax import config as config_lib
  from prorl_jax import data, dist, train
  from prorl_jax.rollout.local import WorkerFailure

  try:
    config_lib.validate(_CONFIG.value)
  except config_lib.ConfigError as e:
    raise SystemExit(f"error: {e}") from None
  dist.initialize(_CONFIG.value.dist)  # before anything touches a device
  logging.getLogger("prorl_jax").info(
      "process %d/%d, %d local / %d global devices: %s", jax.process_index(),
      jax.process_count(), jax.local_device_count(), jax.device_count(), jax.devices())
  try:
    train.run(_CONFIG.value)
  except (config_lib.ConfigError, data.DataError, WorkerFailure) as e:
    raise SystemExit(f"error: {e}") from None


def cli():
  """The `prorl-train` console script."""
  flags.mark_flags_as_required(["config"])
  app.run(main)


if __name__ == "__main__":
  cli()
