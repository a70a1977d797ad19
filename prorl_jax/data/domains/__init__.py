"""What the audit, the red team and the honest-format check know about each verifier's domain:
one module per verifier module, named as `rewards` names it (`math`, `mcq` for stem and mcq,
`puzzles` for reasoning_gym, `code`, `ifeval`), found by that name as `rewards.warm` finds a
verifier's `warm` (`hooks`). A verifier without one is listed by the audit as unaudited; a new
domain is audited by adding its module here, no other file.

A domain module offers
  wrap(text) -> str              an answer (or a program) in its verifier's format, after a
                                 closed think block
  answer_of(row) -> str | None   the row's reference as an answer's text (None: it has none)
  honest(row) -> {style: text}   the reference written as reasoning models write it
and may offer
  reference(row)                 the reference as a response (default: wrap(answer_of(row)))
  responses(row, others)         (reference response, honest wrong one, {strategy: response})
                                 (default: the answer strategies, `data.audit`)
  attacks_of(prompt, extra, answer, spec, seed)  {class: [(attack, bar or None)]} (default:
                                 the answer attacks, `data.attacks.answer_classes`)
  near_misses(row, ref)          wrong answers beyond the other rows' (a puzzle's roles swapped)
  VETO                           the `veto` strategy's answer (default: JSON 100,000 deep)
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType

from prorl_jax import rewards

DEEP_JSON = "[" * 100_000 + "]" * 100_000
HONEST_TEXT = "Here is a plain reply in ordinary prose. It follows no special format on purpose."
_INT = re.compile(r"[+-]?\d+")


def hooks(verifier: str) -> ModuleType | None:
  """The domain module of verifier `verifier` (a verifier's name, as routing gives it), or None
  when its domain has none."""
  name = f"{__name__}.{rewards.module_of(verifier)}"
  try:
    return importlib.import_module(name)
  except ModuleNotFoundError as e:
    if e.name != name:  # the module exists and failed on an import of its own
      raise
    return None


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
