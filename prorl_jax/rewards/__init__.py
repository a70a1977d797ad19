"""Reward verifiers (plain Python, never jax): they run inside rollout workers.

Every verifier is `score(response, reference, **meta) -> Score`. A verifier that fails (raises,
times out) is *marked* (`failed=True`) and counted, never silently scored 0: the trainer can drop
such samples. `route(data_source)` picks the verifier from the routing table.
"""

from __future__ import annotations

import dataclasses
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Score:
  value: float  # in [0, 1]
  reason: str = ""
  failed: bool = False  # the verifier itself failed: not a judgement of the response


Verifier = Callable[..., Score]


def _registry() -> dict[str, Verifier]:
  from prorl_jax.demo import chain_sum
  from prorl_jax.rewards import code, ifeval, math, mcq, puzzles

  return {
    "chain_sum": chain_sum.score,
    "length_format": chain_sum.format_score,
    "math": math.score,
    "code": code.score,
    "reasoning_gym": puzzles.score,
    "ifeval": ifeval.score,
    "stem": mcq.score,
    "mcq": mcq.score,
  }


# The ProRL data sources -> verifier; extend with data.reward_routing.
DEFAULT_ROUTING = {
  "deepscaler": "math",
  "math": "math",
  "aime": "math",
  "amc": "math",
  "codecontests": "code",
  "apps": "code",
  "codeforces": "code",
  "taco": "code",
  "primeintellect": "code",
  "reasoning_gym": "reasoning_gym",
  "ifeval": "ifeval",
  "llama_nemotron_if": "ifeval",
  "scp": "stem",
  "gpqa": "stem",
  "humanevalplus": "code",
  "livecodebench": "code",
}

# Verifiers whose score is a judgement in [0, 1] (reported as a mean); the others' benchmarks
# report pass@1, the mean over samples of score == 1.
CONTINUOUS = ("ifeval", "reasoning_gym")


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


def safe_score(verifier: Verifier, response: str, reference, **meta) -> Score:
  """Runs a verifier; an exception becomes a marked failure with its message, not a 0."""
  try:
    s = verifier(response, reference, **meta)
  except Exception as e:  # noqa: BLE001 - any verifier bug must be reported, not crash a worker
    return Score(0.0, f"verifier error: {type(e).__name__}: {e}", failed=True)
  if not 0.0 <= s.value <= 1.0:
    return Score(0.0, f"verifier returned {s.value} outside [0, 1]", failed=True)
  return s
