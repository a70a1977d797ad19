r"""Math: the last `\boxed{...}` after `</think>`, verified against the reference with
math-verify. Binary. A response whose think block never closes scores 0.

An answer written exactly as the reference (ignoring spaces and `$`) is correct without
math-verify, so a huge but correct number (`10^{10000000}`) needs no symbolic evaluation.
math-verify's own timeouts and parser errors are marked verifier failures (`Score.failed`),
never a silent 0; an answer it cannot read at all is wrong.
"""

from __future__ import annotations

import re
import signal
import threading

from prorl_jax.rewards import Score
from prorl_jax.rewards.common import after_think, last_boxed

_SPACE = re.compile(r"\s+|\$|\\[,;:! ]")


def _plain(s: str) -> str:
  return _SPACE.sub("", s)


def _cancel_alarm():
  """math-verify times out with SIGALRM and can leave an alarm pending when a call finishes at
  its deadline; the stray TimeoutException would then hit whatever runs next."""
  if threading.current_thread() is threading.main_thread():
    signal.alarm(0)


def score(response: str, reference, *, timeout_s: int = 5, **_) -> Score:
  from math_verify import errors, parse, verify  # imported in the verifier process only

  final = after_think(response)
  if final is None:
    return Score(0.0, "unfinished <think> block")
  boxed = last_boxed(final)
  if boxed is None:
    return Score(0.0, "no \\boxed{} answer after </think>")
  ref = str(reference)
  bare_ref = last_boxed(ref) if "\\boxed" in ref else ref
  if bare_ref is not None and _plain(boxed) and _plain(boxed) == _plain(bare_ref):
    return Score(1.0, "correct (as written)")
  try:
    gold = parse(
      ref if "\\boxed" in ref or "$" in ref else f"${ref}$",
      parsing_timeout=timeout_s,
      raise_on_error=True,
    )
    if not gold:
      return Score(0.0, f"reference {ref[:50]!r} could not be parsed", failed=True)
    pred = parse(f"\\boxed{{{boxed}}}", parsing_timeout=timeout_s, raise_on_error=True)
    if not pred:
      return Score(0.0, f"answer {boxed[:50]!r} could not be parsed")
    ok = verify(gold, pred, timeout_seconds=timeout_s, raise_on_error=True)
  except errors.TimeoutException:
    return Score(0.0, f"math-verify timed out after {timeout_s}s on {boxed[:50]!r}", failed=True)
  except Exception as e:  # noqa: BLE001 - a parser/sympy blow-up is the verifier's failure
    return Score(0.0, f"math-verify error: {type(e).__name__}: {str(e)[:80]}", failed=True)
  finally:
    _cancel_alarm()
  return Score(1.0 if ok else 0.0, "correct" if ok else f"wrong: {boxed[:50]!r}")
