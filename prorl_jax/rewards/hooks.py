"""Where a verifier's hooks are found: its module (`rewards.<module>`, by the verifier's name) and
the functions it may offer there (`warm`, `hack_flags`), imported when asked for; a verifier's
audit hooks are its domain's module of the same name in `data.domains`. Imports no verifier."""

from __future__ import annotations

import importlib


def module_of(name: str) -> str:
  """The module of verifier `name` (`rewards.<module>`)."""
  return {"stem": "mcq", "reasoning_gym": "puzzles"}.get(name, name)


def hook(name: str, attr: str):
  """Verifier `name`'s hook `attr` (a function of its module), or None where it offers none."""
  return getattr(importlib.import_module(f"prorl_jax.rewards.{module_of(name)}"), attr, None)
