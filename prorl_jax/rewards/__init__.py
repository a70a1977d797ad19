"""Reward verifiers (plain Python, never jax): they run inside rollout workers.

Every verifier is `score(response, reference, **meta) -> Score`. Three outcomes are kept apart:
- a judgement of the response, in [0, 1];
- a failure the response caused (any exception while reading or running it, a timeout, a
  memory or CPU kill): 0, marked `response_error` and counted, so a response can never drop its
  own sample (references are checked when the data is prepared);
- a fault that is provably not the response's (sandbox unavailable, an item the verifier cannot
  score, a verifier process that died before judging it): marked `failed` and counted; the
  trainer drops that sample, never its group.
`starved` marks a judgement cut short by other load (little CPU time at the wall-clock limit):
the pool scores it again alone. `route(data_source)` picks the verifier from the routing table.
"""

from __future__ import annotations

import importlib

from prorl_jax.rewards.common import Score, Verifier  # noqa: F401 - the package's API
from prorl_jax.rewards.hooks import hook, module_of  # noqa: F401 - the package's API
from prorl_jax.rewards.verifiers import VERIFIERS, VerifierSpec  # noqa: F401 - the package's API


def _registry() -> dict[str, Verifier]:
  # lazy: the sandbox modules also run from a copy of this package without the verifiers
  return {
    name: importlib.import_module(f"prorl_jax.rewards.{spec.module}").score
    for name, spec in VERIFIERS.items()
  }


# Derived from the table (`rewards/verifiers.py`): the ProRL data sources -> verifier (extend
# with data.reward_routing), the confined verifiers, the continuous ones.
DEFAULT_ROUTING = {src: spec.name for spec in VERIFIERS.values() for src in spec.sources}
ISOLATED = tuple(name for name, spec in VERIFIERS.items() if spec.isolated)
CONTINUOUS = tuple(name for name, spec in VERIFIERS.items() if spec.continuous)


def continuous(data_source: str, table: dict[str, str] | None = None) -> bool:
  """Is the data source's score continuous (mean score) rather than pass/fail (pass@1)?"""
  return verifier_name(data_source, table) in CONTINUOUS


def verifier_names() -> list[str]:
  return sorted(_registry())


def verifier_name(data_source: str, table: dict[str, str] | None = None) -> str:
  """The verifier's name for a data source (`table` maps source -> verifier, identity by
  default); KeyError with one line that says what to do when there is none."""
  name = {**DEFAULT_ROUTING, **(table or {})}.get(data_source, data_source)
  if name not in _registry():
    raise KeyError(
      f"no verifier for data_source {data_source!r} (verifier {name!r}); known: "
      f"{', '.join(verifier_names())}; add it to the reward routing table "
      "(data.reward_routing=source:verifier)"
    )
  return name


def route(data_source: str, table: dict[str, str] | None = None) -> Verifier:
  """The verifier for a data source (see `verifier_name`)."""
  return _registry()[verifier_name(data_source, table)]


def checked(s: Score) -> Score:
  """`s`, or a marked failure when its value is outside [0, 1] (or not a number)."""
  if not 0.0 <= s.value <= 1.0:
    return Score(0.0, f"verifier returned {s.value} outside [0, 1]", failed=True)
  if s.response_error and s.value != 0.0:
    return Score(0.0, s.reason, response_error=True)
  return s


def safe_score(verifier: Verifier, response: str, reference, **meta) -> Score:
  """Runs a verifier; any exception while it reads the response is a response error (0,
  counted, the reason naming it): references are checked when the data is prepared, so what is
  left to break is the response. A verifier reports a fault of its own (no sandbox, an item it
  cannot score) as a `failed` Score, never by raising."""
  try:
    s = verifier(response, reference, **meta)
  except Exception as e:  # noqa: BLE001 - the response broke its judgement: 0, never a veto
    return Score(0.0, f"response error: {type(e).__name__}: {str(e)[:120]}", response_error=True)
  return checked(s)


def warm(name: str, reference, meta: dict) -> None:
  """Loads what verifier `name` needs for an item (modules, generated puzzles) in the pool
  process itself, before the throw-away child is forked: trusted work, no response text."""
  fn = hook(name, "warm")
  if fn is not None:
    fn(reference, **meta)
