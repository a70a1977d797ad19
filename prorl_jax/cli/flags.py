"""absl flags for the commands that take no config (prepare, export, plot, audit, worker, layout):
each defines its flags on its own `FlagValues` and reads its command line with `parse`, so its
`main(argv)` can run many times in one process and returns an exit status. The config-file
commands (`prorl_jax.main`, `cli.eval`, `cli.config`) use absl's `app.run` with `config_flags`.

Imports nothing but absl: the worker's command runs in vLLM's environment.
"""

from __future__ import annotations

import sys

from absl import flags

USAGE_EXIT = 2


def parse(fv: flags.FlagValues, argv: list[str] | None, *, prog: str, about: str, args: str = ""):
  """`argv` (the arguments after the program; default sys.argv's) read into `fv`; returns the
  positional arguments, or None after saying on one line of stderr what is wrong with them (an
  unknown flag, a bad value, a missing required flag, positional arguments where `args` names
  none): the command then exits with USAGE_EXIT. `--help` prints the usage, `about` and every
  flag, and exits 0."""
  argv = list(sys.argv[1:] if argv is None else argv)
  if any(a in ("-h", "--help", "--helpshort", "--helpfull") for a in argv):
    own = [m for m in fv.flags_by_module_dict() if not m.startswith("absl.")]  # not --flagfile
    text = "\n".join(
      line for m in own for line in fv.module_help(m).splitlines() if line.startswith("  ")
    )  # the flags without their module's name
    print(f"usage: {prog} [flags] {args}".rstrip() + f"\n\n{about}\n\nflags:\n{text}")
    sys.exit(0)
  fv.unparse_flags()
  fv.set_gnu_getopt(True)  # flags before, between and after the positional arguments
  try:
    rest = fv([prog] + argv)[1:]
    fv.validate_all_flags()
  except flags.Error as e:
    return _usage_error(prog, e)
  if rest and not args:
    return _usage_error(prog, f"unexpected arguments {rest}; flags take the form --name=value")
  return rest


def define_engine(fv: flags.FlagValues, default: str, help_text: str, names) -> None:
  """`--engine`: one of `names()`, read when the command line is (the engine table as it stands
  then, so an engine registered by a row is accepted without touching the command)."""
  flags.DEFINE_string("engine", default, f"{help_text}: {' | '.join(names())}", flag_values=fv)

  def known(value: str) -> bool:
    if value not in names():
      raise flags.ValidationError(f"want one of {', '.join(names())}")
    return True

  flags.register_validator("engine", known, flag_values=fv)


def _usage_error(prog: str, msg) -> None:
  print(f"error: {' '.join(str(msg).split())} (see {prog} --help)", file=sys.stderr)
