"""What every verifier shares: the `Score` it returns, and answer extraction (the text after
the reasoning, boxed answers, answer tags)."""

from __future__ import annotations

import dataclasses
import decimal
import fractions
import itertools
import json
import re
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Score:
  value: float  # in [0, 1]
  reason: str = ""
  failed: bool = False  # the verifier itself failed: not a judgement of the response
  response_error: bool = False  # the response made the verifier fail: scored 0, counted
  starved: bool = False  # cut short by other load, not by the response: to be scored again
  flags: tuple = ()  # what the hack monitor's detectors see in the response (rewards.detectors)


Verifier = Callable[..., Score]

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
UNFINISHED = "unfinished thinking: no </think>, so no final answer"


@dataclasses.dataclass(frozen=True)
class Reading:
  """A response split once into its reasoning (never judged) and its final answer."""

  answer: str | None  # the text a verifier judges; None when the response gave no final answer
  why: str = ""  # why there is none


def template_opens_think(prompt_text: str | None) -> bool:
  """Does the prompt, as the worker decodes it, end inside a think block the chat template opened
  (DeepSeek-R1-Distill's ends with `<think>\n`)? Then a response starts in its reasoning."""
  return bool(prompt_text) and prompt_text.rstrip().endswith(THINK_OPEN)


def without_think_tag(prompt_text: str | None) -> str | None:
  """The prompt's text without the think tag its template ends with (not a word of the prompt)."""
  if template_opens_think(prompt_text):
    return prompt_text.rstrip()[: -len(THINK_OPEN)]
  return prompt_text


_THINK_TAG = re.compile(r"</?think>")
# The think reading's one state machine: (state, tag) -> the next state, or why it is malformed.
# "outside": no block opened (the template opened none); "thinking": inside the reasoning
# (opened by the template or by the response); "closed": after the one `</think>`.
THINK_STATES = {
  ("outside", THINK_OPEN): "thinking",
  ("outside", THINK_CLOSE): "malformed: a </think> that closes no <think>",
  ("thinking", THINK_OPEN): "thinking",  # reopening the open reasoning changes nothing
  ("thinking", THINK_CLOSE): "closed",
  ("closed", THINK_OPEN): "malformed: a <think> after </think>",
  ("closed", THINK_CLOSE): "malformed: a second </think> (one closes the reasoning)",
}


def read(response: str, prompt_text: str | None = None) -> Reading:
  """The one reading of a response, relative to its prompt (the same in every verifier and in the
  hack monitor's detectors), by the state machine `THINK_STATES`: the reasoning is open from the
  start when the template opened it, else from the response's `<think>`; the final answer is the
  text after the one `</think>` that closes it. Still open at the end: no final answer (cut off
  or never concluded: scratch work is not an answer). A `</think>` that closes nothing (the
  template and the response opened none), a second `</think>`, or a `<think>` after the close is
  malformed. A response that never opens a block is all final answer."""
  state, answer_from = ("thinking" if template_opens_think(prompt_text) else "outside"), 0
  for m in _THINK_TAG.finditer(response):
    state = THINK_STATES[(state, m.group(0))]
    if state.startswith("malformed"):
      return Reading(None, state)
    if state == "closed":
      answer_from = m.end()
  if state == "thinking":
    return Reading(None, UNFINISHED)
  return Reading(response[answer_from:])


def last_boxed(text: str) -> str | None:
  r"""Content of the last `\boxed{...}` (balanced braces, escaped ones aside), or of `\boxed x`;
  None if absent."""
  i = text.rfind("\\boxed")
  if i < 0:
    return None
  j = i + len("\\boxed")
  if j < len(text) and text[j] == " ":
    m = re.match(r" (\S+)", text[j:])
    return m.group(1).rstrip("$.") if m else None
  if j >= len(text) or text[j] != "{":
    return None
  depth, k = 0, j
  while k < len(text):
    if text[k] == "\\":  # an escaped brace (`\\{` of `\\left\\{`) is text, not a group
      k += 2
      continue
    if text[k] == "{":
      depth += 1
    elif text[k] == "}":
      depth -= 1
      if depth == 0:
        return text[j + 1 : k]
    k += 1
  return None  # unbalanced: the box never closed


def answer_tag(text: str) -> str | None:
  found = _ANSWER_TAG.findall(text)
  return found[-1].strip() if found else None


def blank(text: str | None) -> bool:
  """No answer at all: None, empty, or whitespace only (an empty answer earns nothing)."""
  return text is None or not text.strip()


JSON_MAX_DEPTH = 64
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKETS = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
  """The deepest nesting of arrays and objects in JSON text (strings skipped)."""
  moves = (1 if c in "[{" else -1 for c in _BRACKETS.findall(_JSON_STRING.sub("", text)))
  return max(itertools.accumulate(moves, initial=0))


def load_json(text: str, *, max_depth: int = JSON_MAX_DEPTH, max_bytes: int = 8 << 20):
  """json.loads with bounds: ValueError (never RecursionError or MemoryError) for text deeper
  than `max_depth` or longer than `max_bytes`; NaN and Infinity are refused."""
  if len(text) > max_bytes:
    raise ValueError(f"JSON text over {max_bytes} bytes")
  if json_depth(text) > max_depth:
    raise ValueError(f"JSON nested deeper than {max_depth}")

  def no_constant(name):
    raise ValueError(f"JSON constant {name} is not a value")

  return json.loads(text, parse_constant=no_constant)


_INTEGER = re.compile(r"[+-]?\d+")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _decimal(token: str) -> decimal.Decimal | None:
  """A finite number token as an exact Decimal; None for anything else (nan, inf, words)."""
  if not _NUMBER.fullmatch(token):
    return None
  try:
    return decimal.Decimal(token)
  except decimal.InvalidOperation:  # an exponent beyond any context (1e1234567890123456789)
    return None


REL_TOL = fractions.Fraction(1, 10**6)


def close(a: fractions.Fraction, b: fractions.Fraction) -> bool:
  """|a - b| <= 1e-6 * |b|, exactly (no float overflow): relative to the reference, so 0 equals
  only 0 and 6.6e-34 is not 0."""
  return abs(a - b) <= REL_TOL * abs(b)


def same_token(got: str, want: str) -> bool:
  """One answer token against the expected one, as the expected one says: an integer needs the
  same integer (`3.0` is 3, `123456700.0` is not 123456789); a decimal allows 1e-6 of itself
  (relative: 0 only 0); anything else must be equal. NaN, infinities and words never match."""
  if got == want:
    return True
  w = _decimal(want)
  g = _decimal(got) if w is not None else None
  if w is None or g is None:
    return False
  if _INTEGER.fullmatch(want):  # an integer: exactly this integer, however it is written
    return g == w
  if g.is_zero() or w.is_zero():
    return g.is_zero() and w.is_zero()
  if abs(g.adjusted() - w.adjusted()) > 1:  # orders of magnitude apart: never within 1e-6
    return False
  # Relative closeness is scale-free: both brought near 1 first, so 1e-999999999 never becomes a
  # Fraction with a billion-digit denominator.
  shift = -w.adjusted()
  g, w = (_scaled(x, shift) for x in (g, w))
  return close(g, w)


def _scaled(x: decimal.Decimal, shift: int) -> fractions.Fraction:
  """x * 10**shift, exactly."""
  ctx = decimal.Context(
    prec=max(28, len(x.as_tuple().digits)), Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN
  )
  return fractions.Fraction(x.scaleb(shift, context=ctx))
