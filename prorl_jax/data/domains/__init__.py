"""What the audit, the red team and the honest-format check know about each verifier's domain:
one module per domain (`math`, `mcq` for stem and mcq, `puzzles` for reasoning_gym, `code`,
`ifeval`), named by the verifier's row (`rewards.verifiers.VerifierSpec.domain`). Each module
declares its hooks as one typed value, `DOMAIN = Domain(...)`: a misspelled hook is a TypeError
when the module is imported, never a silent fall back to a default. A verifier whose row names
no domain is listed by the audit as unaudited.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from typing import Callable

from prorl_jax import rewards

DEEP_JSON = "[" * 100_000 + "]" * 100_000  # the default veto: JSON 100,000 deep
HONEST_TEXT = "Here is a plain reply in ordinary prose. It follows no special format on purpose."
_INT = re.compile(r"[+-]?\d+")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Domain:
  """A domain's hooks. Required: `wrap(text)` an answer (or a program) in its verifier's format,
  after a closed think block; `answer_of(row)` the row's reference as an answer's text (None: it
  has none); `honest(row)` {style: the reference written as reasoning models write it}.
  Optional (None: the audit's default): `reference(row)` the reference as a response (default:
  wrap(answer_of(row))); `responses(row, others)` (reference response, honest wrong one,
  {strategy: response}) (default: the answer strategies, `data.audit`); `attacks_of(prompt,
  extra, answer, spec, seed)` {class: [(attack, bar or None)]} (default: the answer attacks,
  `data.attacks.answer_classes`); `near_misses(row, ref)` wrong answers beyond the other rows'
  (a puzzle's roles swapped); `tests(row)` the row's code tests; `veto` the `veto` strategy's
  answer (default: JSON 100,000 deep)."""

  wrap: Callable[[str], str]
  answer_of: Callable[[dict], str | None]
  honest: Callable[[dict], dict]
  reference: Callable[[dict], str] | None = None
  responses: Callable | None = None
  attacks_of: Callable | None = None
  near_misses: Callable[[dict, str | None], list] | None = None
  tests: Callable[[dict], dict] | None = None
  veto: str = "[" * 100_000 + "]" * 100_000


def hooks(verifier: str) -> Domain | None:
  """The domain of verifier `verifier` (a verifier's name, as routing gives it), or None when its
  row names none."""
  spec = rewards.VERIFIERS.get(verifier)
  if spec is None or spec.domain is None:
    return None
  domain = importlib.import_module(f"{__name__}.{spec.domain}").DOMAIN
  if not isinstance(domain, Domain):
    raise TypeError(f"{__name__}.{spec.domain}.DOMAIN is {type(domain).__name__}, not a Domain")
  return domain


def question(row: dict) -> str:
  """The row's prompt as the model reads it (every message but the system's)."""
  return "\n".join(str(m["content"]) for m in row["messages"] if m.get("role") != "system")


def nudge(text: str) -> str | None:
  """A float close to an integer but not equal to it (123456789 -> 123456801.3...)."""
  t = text.strip()
  if not _INT.fullmatch(t) or len(t) > 30:
    return None
  v = int(t)
  return repr(float(v) * (1 + 1e-7) + (1e-7 if v == 0 else 0.0))
