"""One error path for the command lines: a failure the user can fix ends in one line on stderr
that says what to fix, exit status 2, no traceback (`--debug` or PRORL_DEBUG=1 shows it):
`user_errors` for the absl commands, `exit_status` for those whose `main(argv)` returns a status.

`parse_flags` is the absl flags parser of the config-file CLIs (prorl-train, prorl-eval): it
checks `--config=FILE[:variant]` and every `--config.a.b=value` override against the config's
fields before absl loads anything, naming the closest field for a typo.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import glob
import os
import re
import sys

from absl import flags

from prorl_jax import config as config_lib

USAGE_EXIT = 2


def debug_on(argv: list[str] | None = None) -> bool:
  argv = sys.argv if argv is None else argv
  return os.environ.get("PRORL_DEBUG", "") not in ("", "0") or "--debug" in argv


def say(msg) -> None:
  """Prints `error: msg` on stderr, on one line."""
  print("error: " + " ".join(str(msg).split()), file=sys.stderr)


def fail(msg: str) -> None:
  """Prints `error: msg` (one line) and exits with status 2."""
  say(msg)
  sys.exit(USAGE_EXIT)


def exit_status(fn, *types: type[BaseException]) -> int:
  """fn()'s exit status, for a command whose `main(argv)` returns one: a user-fixable error (of
  `types`) becomes one line and status 2, as `user_errors` does for the absl commands (with
  --debug or PRORL_DEBUG=1 it propagates with its traceback)."""
  try:
    return fn()
  except types as e:
    if debug_on():
      raise
    say(e)
    return USAGE_EXIT


@contextlib.contextmanager
def user_errors(*types: type[BaseException]):
  """Turns the listed exception types (user-fixable problems) into `fail(...)`; with --debug
  or PRORL_DEBUG=1 they propagate with their traceback."""
  try:
    yield
  except types as e:
    if debug_on():
      raise
    fail(str(e))


def check_config_args(argv: list[str]) -> None:
  """Fails in one line on a missing config file or an override of a field that does not exist
  (naming the closest field)."""

  fields = None
  for arg in argv[1:]:
    m = re.match(r"--(?!config[.=])([A-Za-z_][\w.]*)", arg)
    if m and m.group(1) not in flags.FLAGS and m.group(1).split(".")[-1] != "debug":
      key = _config_key(m.group(1))  # `--total_steps=3`: a config field without its prefix
      if key:
        fail(f"{arg.split('=')[0]} is not a flag of this command; did you mean --config.{key}?")
    m = re.match(r"--config=([^:]*)", arg)
    if m:
      path = m.group(1)
      here = sorted(glob.glob("configs/*.py"))
      configs = f"; the configs here are: {', '.join(here)}" if here else ""
      if not os.path.isfile(path):
        fail(f"--config={path}: no such file{configs}")
      if why := _not_a_config(path):
        fail(f"--config={path}: {why}; a config is a Python file with get_config(){configs}")
      continue
    m = re.match(r"--config\.([^=]+)", arg)
    if m:
      key = m.group(1)
      if fields is None:
        sections = config_lib.sections()
        fields = list(config_lib.flat(config_lib.base_config())) + list(sections)
      if key not in fields:
        near = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.6)
        fail(
          f"--config.{key} is not a config field"
          + (
            f"; did you mean --config.{near[0]}?"
            if near
            else "; list them with python -m prorl_jax.cli.config"
          )
        )
      if key in sections and "=" in arg:
        fail(
          f"--config.{key} is a section; set one of its fields, e.g. --config.{sections[key]}=..."
        )


def _not_a_config(path: str) -> str | None:
  """Why the file at `path` is no config module (None when it is Python with `get_config`)."""
  try:
    with open(path, encoding="utf-8") as f:
      tree = compile(f.read(), path, "exec", flags=ast.PyCF_ONLY_AST)
  except (SyntaxError, UnicodeDecodeError, ValueError) as e:
    line = getattr(e, "lineno", None)
    return "not Python" + (f" (line {line})" if line else "")
  defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
  return None if "get_config" in defined else "defines no get_config()"


def _config_key(name: str) -> str | None:
  """The config field `name` names without its `--config.` prefix: itself (`rollout.n`) or the
  one field whose last part it is (`total_steps`, `kl_coef` -> `algo.kl_coef`)."""
  keys = list(config_lib.flat(config_lib.base_config()))
  if name in keys:
    return name
  tails = [k for k in keys if k.rsplit(".", 1)[-1] == name]
  return tails[0] if len(tails) == 1 else None


def _last_line(text: str) -> str:
  """The line that says what went wrong in absl's and ml_collections' messages (which may
  embed a traceback): the exception line at the end, else the whole text on one line."""
  lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
  if any(ln.startswith("Traceback") for ln in lines):
    last = lines[-1]
    return re.sub(r"^[A-Za-z_.]*(Error|Exception): ", "", last)
  return " ".join(lines)


HELP_ARGS = ("--help", "-h", "--helpshort", "-?")


def print_help(usage: str) -> None:
  """`usage`, then the command's own flags (not absl's), then where the config keys are."""

  print(usage.strip() + "\n\nflags:")
  for module, defined in sorted(flags.FLAGS.flags_by_module_dict().items()):
    if module.startswith("absl"):
      continue
    for f in sorted(defined, key=lambda f: f.name):
      default = "" if f.default in (None, "", []) else f" (default: {f.default_as_str})"
      text = " ".join(str(f.help).split())
      print(f"  --{f.name}: {text}{default}")
  print(
    "\n--config.<key>=VALUE overrides one field of the config file; list the keys, their "
    "defaults and meanings with `python -m prorl_jax.cli.config --config=FILE` (docs/config.md)."
  )


_PYTHON_WORDING = (  # what int(), float() and absl say of a value, and what we say instead
  (
    r"\('Non-boolean argument to boolean flag', '(.*)'\)",
    r"\1 is not a boolean: use True or False",
  ),
  (r"invalid literal for int\(\) with base 10: '(.*)'", r"\1 is not an integer"),
  (r"could not convert string to float: '(.*)'", r"\1 is not a number"),
)


def _plain_wording(msg: str) -> str:
  for pattern, says in _PYTHON_WORDING:
    msg = re.sub(pattern, says, msg)
  return msg


def parse_flags(argv: list[str], usage: str = "") -> list[str]:
  """absl `flags_parser` with one-line errors (see the module docstring); `--help` prints
  `usage` and the command's flags, exit 0."""

  if any(a in HELP_ARGS for a in argv[1:]):
    print_help(usage or f"usage: {os.path.basename(argv[0])} [flags]")
    sys.exit(0)
  argv = [a for a in argv if a != "--debug"]
  if not debug_on(argv + sys.argv):
    check_config_args(argv)
  try:
    return flags.FLAGS(argv)
  except (flags.Error, OSError, ValueError, AttributeError, KeyError, TypeError) as e:
    if debug_on(sys.argv):
      raise
    fail(_plain_wording(_last_line(str(e))))
  return []
