r"""Math: the last `\boxed{...}` after `</think>`, verified against the reference with
math-verify. Binary. A response whose think block never closes scores 0."""

from __future__ import annotations

from prorl_jax.rewards import Score
from prorl_jax.rewards.common import after_think, last_boxed


def score(response: str, reference, *, timeout_s: int = 5, **_) -> Score:
  from math_verify import parse, verify  # imported in the verifier process only

  final = after_think(response)
  if final is None:
    return Score(0.0, "unfinished <think> block")
  boxed = last_boxed(final)
  if boxed is None:
    return Score(0.0, "no \\boxed{} answer after </think>")
  ref = str(reference)
  gold = parse(ref if "\\boxed" in ref or "$" in ref else f"${ref}$",
               parsing_timeout=timeout_s)
  pred = parse(f"\\boxed{{{boxed}}}", parsing_timeout=timeout_s)
  if not gold:
    return Score(0.0, f"reference {ref!r} could not be parsed", failed=True)
  if not pred:
    return Score(0.0, f"answer {boxed[:50]!r} could not be parsed")
  ok = verify(gold, pred, timeout_seconds=timeout_s)
  return Score(1.0 if ok else 0.0, "correct" if ok else f"wrong: {boxed[:50]!r}")
