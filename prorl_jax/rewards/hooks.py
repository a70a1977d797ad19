"""Where a verifier's hooks are found: its module (`rewards.<module>`, from its row in
`rewards/verifiers.py`) and the functions it may offer there (`verifiers.HOOKS`), imported when
asked for. Imports no verifier until a hook is asked for."""

from __future__ import annotations

import importlib

from prorl_jax.rewards.verifiers import HOOKS, VERIFIERS


def module_of(name: str) -> str:
  """The module of verifier `name` (`rewards.<module>`; a name without a row is its own)."""
  spec = VERIFIERS.get(name)
  return spec.module if spec else name


def hook(name: str, attr: str):
  """Verifier `name`'s hook `attr` (a function of its module), or None where it offers none;
  a name that is no hook is an error (a misspelling would silently find nothing)."""
  if attr not in HOOKS:
    raise ValueError(f"{attr!r} is not a verifier hook; the hooks are {', '.join(HOOKS)}")
  return getattr(importlib.import_module(f"prorl_jax.rewards.{module_of(name)}"), attr, None)
