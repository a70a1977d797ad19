"""`python -m prorl_jax.cli.config [--config=FILE[:variant]] [--markdown]`: every config key, its
default and meaning, beside a config file's values."""

from absl import app, flags
from ml_collections import config_flags

from prorl_jax.cli import errors as cli_lib
from prorl_jax.config import listing


def main(argv):
  del argv
  print(listing(flags.FLAGS.config, markdown=flags.FLAGS.markdown), end="")


def run():
  config_flags.DEFINE_config_file(
    "config", None, "a config file (its values are listed beside the defaults)", lock_config=True
  )
  flags.DEFINE_boolean("markdown", False, "a Markdown table of keys, defaults and meanings")
  app.run(main, flags_parser=cli_lib.parse_flags)


if __name__ == "__main__":
  run()
