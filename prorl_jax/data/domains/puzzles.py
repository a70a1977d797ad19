"""The Reasoning Gym verifier's domain (`rewards.puzzles`): an `<answer>` tag; the reference is
the regenerated item's answer; a wrong answer near it has the puzzle's roles swapped."""

from __future__ import annotations

import json
import re

from prorl_jax.data import honest as honest_lib
from prorl_jax.data.domains import Domain
from prorl_jax.rewards import puzzles

_RG_KEYS = ("task", "seed", "size", "index")
_SWAPS = {"true": "false", "false": "true", "yes": "no", "no": "yes"}


def wrap(text: str) -> str:
  return f"<think>done</think><answer>{text}</answer>"


def _entry(row: dict) -> dict:
  return puzzles._entry(row["extra"].get("entry"), *(row["extra"].get(k) for k in _RG_KEYS))


def answer_of(row: dict) -> str | None:
  e = _entry(row)
  if e["answer"] is None and "possible_answer" in e["metadata"]:
    return json.dumps(e["metadata"]["possible_answer"])
  return None if e["answer"] is None else str(e["answer"])


def honest(row: dict) -> dict[str, str]:
  ref = answer_of(row)
  if ref is None:
    return {}
  wrappers = honest_lib.ANSWER_TAG_WRAPPERS
  return {f"tag/{j}": honest_lib.THINK + w.format(x=ref) for j, w in enumerate(wrappers)}


def swapped(answer: str, metadata: dict) -> str | None:
  """A puzzle's answer with each role word swapped for its opposite (true and false; a knights
  and knaves puzzle's own two terms), or reversed when it has none; None when that changes
  nothing."""
  swaps = dict(_SWAPS)
  terms = metadata.get("knight_knave_terms") or {}
  if terms.get("knight") and terms.get("knave"):
    swaps.update({terms["knight"].lower(): terms["knave"], terms["knave"].lower(): terms["knight"]})
  words = re.compile(r"\b(" + "|".join(map(re.escape, swaps)) + r")\b", re.I)
  got = words.sub(lambda m: swaps[m.group(1).lower()], answer)
  got = got if got != answer else answer[::-1]
  return got if got.strip().lower() != answer.strip().lower() else None


def near_misses(row: dict, ref: str | None) -> list[str]:
  """The answer with its roles swapped (a parser reads past a digit appended to a sentence)."""
  got = swapped(ref or "", _entry(row).get("metadata") or {})
  return [got] if got else []


DOMAIN = Domain(wrap=wrap, answer_of=answer_of, honest=honest, near_misses=near_misses)
