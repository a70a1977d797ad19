r"""Math: the last `\boxed{...}` after `</think>`, verified against the reference with
math-verify. Binary. A response whose think block never closes scores 0.

Both sides are first read as a careful grader reads them (`quantity.plain_math`): money signs,
thousands separators, scientific notation and degree marks are not part of the value, so
`\$12.50`, `3\,600`, `1.5e8` and `45°` equal 12.5, 3600, 1.5 × 10^8 and 45. An interval and the
inequality that describes it are equal (`(2, 5]` and `2 < x \le 5`). A percentage is read in the
percent scale on both sides (`7\%` equals 7, never 0.07), and two plain numbers must agree to
1e-6 of the reference, 0 only to 0 (math-verify alone rounds to 6 places).

An answer written exactly as the reference (ignoring spaces and `$`) is correct without
math-verify, so a huge but correct number (`10^{10000000}`) needs no symbolic evaluation. Any
other answer more than 4x the reference's length (at least MIN_CAP characters) scores 0: out of
a long box math-verify fishes whatever sub-expression parses.
A reference math-verify cannot read is the verifier's failure (`Score.failed`); an answer that
times math-verify out or blows up its parser is the response's doing (0, `response_error`), and
an empty box earns nothing. math-verify parses with sympy, so it only ever runs in a throw-away
child of the verifier pool (`rewards/isolate.py`).
"""

from __future__ import annotations

import functools
import re
import resource
import signal
import threading
import time

from prorl_jax.rewards import forms, quantity, typeset
from prorl_jax.rewards.common import REL_TOL, Score, blank, last_boxed, read, without_think_tag
from prorl_jax.rewards.quantity import plain_math

_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)")
MIN_CAP = 64  # characters an answer may always have, however short the reference
_SPACE = re.compile(r"\s+|\$|\\[,;:! ]")


def _plain(s: str) -> str:
  return _SPACE.sub("", s)


def _cancel_alarm():
  """math-verify times out with SIGALRM and can leave an alarm pending when a call finishes at
  its deadline; the stray TimeoutException would then hit whatever runs next."""
  if threading.current_thread() is threading.main_thread():
    signal.alarm(0)


@functools.cache
def _warm_once():
  import math_verify  # lazy: sympy's parsers are slow to import, only math items need them

  math_verify.parse("$1$")
  typeset.warm()
  quantity.registry()  # pint: an answer may carry a unit


def warm(reference=None, **_):
  """Imports math-verify and its sympy parsers in the pool process (before the fork), once."""
  _warm_once()


def _gold_text(ref: str) -> str:
  ref = without_percent(plain_math(last_boxed(ref) if "\\boxed" in ref else ref))
  return f"${ref}$"


_PERCENT = re.compile(r"\\%|%|\\text\{\s*\\?%\s*\}|\\,?\s*\\text\{\s*percent\s*\}")


def without_percent(text: str) -> str:
  """A percentage read in the percent scale on both sides: `7\\%` is the number 7, so it equals
  a reference of 7 or 7% and never 0.07 (nor both at once)."""
  return _PERCENT.sub("", text).strip()


def numbers_agree(gold, pred) -> bool:
  """When both sides are plain numbers: equal within REL_TOL of the reference, 0 only to 0
  (math-verify rounds to 6 decimal places: 0.0 would equal 7.2e-21 and 1/6^10)."""
  try:
    if not (getattr(gold, "is_number", False) and getattr(pred, "is_number", False)):
      return True
    g, p = complex(gold.evalf(30)), complex(pred.evalf(30))
  except (TypeError, ValueError, AttributeError, OverflowError):
    return True  # not plain numbers (sets, relations, matrices): math-verify decides
  if g == 0:
    return p == 0
  return abs(p - g) <= float(REL_TOL) * abs(g)


def parsed(reference: str, timeout_s: int = 5):
  """math-verify's reading of a reference (None when it reads nothing)."""
  from math_verify import parse  # lazy: imported in the verifier process only

  try:
    got = parse(_gold_text(str(reference)), parsing_timeout=timeout_s, raise_on_error=True)
  except Exception:  # noqa: BLE001 - unreadable: the caller says why
    return None
  finally:
    _cancel_alarm()
  return got or None


def equivalent(answer: str, reference: str, timeout_s: int = 5) -> bool:
  """Does math-verify find `answer` equal to `reference` (both read as `plain_math`)? False
  when either cannot be read."""
  from math_verify import parse, verify  # lazy: imported in the verifier process only

  gold = parsed(reference, timeout_s)
  if gold is None:
    return False
  try:
    pred = parse(f"\\boxed{{{without_percent(plain_math(answer))}}}", parsing_timeout=timeout_s)
    return (
      bool(pred)
      and verify(gold, pred, timeout_seconds=timeout_s, allow_set_relation_comp=True)
      and numbers_agree(gold[0], pred[0])
    )
  except Exception:  # noqa: BLE001 - an answer math-verify cannot handle is not equal
    return False
  finally:
    _cancel_alarm()


# Operators a final number is computed from, never written with: where the problem states its
# expression with one, an answer that keeps it hands the question back (`\dbinom{16}{5}`).
_UNEVALUATED = re.compile(
  r"\\[dt]?binom|\\choose|\\sum|\\prod|\\i+nt|\\oint|\\lim|\\log|\\ln|\\lg|"
  r"\\(?:sin|cos|tan|sec|csc|cot|arcsin|arccos|arctan)\b|\d\s*!|\)\s*!|\\mathrm\{C\}|\bC\s*\("
)
_BIG = re.compile(r"\\sum|\\prod|\\i+nt|\\oint|\\lim")
_FRACTION = re.compile(r"[+-]?\\[dt]?frac\{?\s*\d+\s*\}?\{?\s*\d+\s*\}?|[+-]?\d+\s*/\s*\d+")


def _operators(text: str) -> set[str]:
  """The unevaluated operators in `text`, by family (`\\dbinom`, `\\binom`, `\\choose`, `C(`
  are one: the binomial; `5!` and `(n)!` the factorial)."""
  out = set()
  for m in _UNEVALUATED.finditer(text):
    op = m.group(0)
    if "binom" in op or "choose" in op or "C" in op:
      op = "binomial"
    elif op.endswith("!"):
      op = "factorial"
    out.add(op.strip())
  return out


def numeric(reference: str) -> bool:
  """A reference that is a number (`4368`, `-2.5`, `\\frac{3}{4}`), not an expression."""
  ref = _plain(without_percent(plain_math(reference)))
  return _NUMBER.fullmatch(ref) is not None or _FRACTION.fullmatch(ref) is not None


_CONSTANT_PARTS = re.compile(
  r"\\(?:[dt]?frac|sqrt|pi|cdot|times|left|right)\b|\\[,;! ]|[\d\s.+\-*/^_(){}\[\]]"
)


# A binomial or a factorial the problem does not state is an exact count, written in closed
# form (`\\binom{16}{5}` for 4368): only the problem's own operator hands it back.
_EXACT_COUNTS = frozenset({"binomial", "factorial"})


def closed_form(reference: str) -> bool:
  """A reference that is a value written in closed form: numbers, fractions, roots, π (`2\\pi`,
  `\\frac{\\sqrt{3}}{2}`), nothing else."""
  ref = plain_math(reference)
  return bool(ref.strip()) and not _CONSTANT_PARTS.sub("", ref).strip()


def hands_back(answer: str, reference: str, prompt_text: str | None) -> str | None:
  """Why a final answer is the question's own expression rather than the number it asks for
  (None when it is not): where the reference is a number, an answer with an integral, sum,
  product or limit; one with an operator (binomial, factorial, log, trig) the problem states;
  or any expression written in the problem word for word. Where the reference is a closed-form
  value (`\\frac{\\sqrt{3}}{2}`, `2\\pi`: no variable, no such operator), an answer that applies
  a function the reference does not (`\\sin\\frac{\\pi}{3}`, `\\log_2 8`, an integral) is the
  computation, not its value; a binomial or factorial is an exact count unless the problem
  states it."""
  extra = _operators(answer) - _operators(reference) - _EXACT_COUNTS
  if extra and closed_form(reference):
    return f"an unevaluated {sorted(extra)[0].strip(chr(92))} for a value"
  if not numeric(reference):
    return None
  if _BIG.search(answer):
    return "an unevaluated sum, product, integral or limit for a number"
  question = _plain(without_think_tag(prompt_text) or "")
  if _operators(answer) & _operators(question):
    return "the problem's own operator, not the number it asks for"
  mine = _plain(answer)
  simple = _NUMBER.fullmatch(mine) or _FRACTION.fullmatch(mine)
  if len(mine) >= 3 and not simple and mine in question:
    return "the problem's own expression, not the number it asks for"
  return None


def _final_box(response: str, prompt_text: str | None) -> tuple[str | None, Score | None]:
  """The last boxed answer after the think block, or why there is none."""
  said = read(response, prompt_text)
  if said.answer is None:
    return None, Score(0.0, said.why)
  boxed = last_boxed(said.answer)
  if boxed is None:
    return None, Score(0.0, "no \\boxed{} answer after </think>")
  if blank(boxed):
    return None, Score(0.0, "empty \\boxed{} answer")
  return without_percent(plain_math(boxed)), None


_RELATION = re.compile(r"(?<![<>!\\])=|\\equiv|\\approx|≈|≡|\\simeq|\\cong")
_MODULUS = re.compile(r"\s*\(\s*(?:\\?b?mod)\s*[^()]*\)\s*$|\s*\\?b?mod\s*\S+\s*$")
_SEVERAL = re.compile(r",|;|\bor\b|\band\b|\\lor|\\vee|\\land|\\wedge")  # several values
_ANY_RELATION = re.compile(r"=|<|>|\\le|\\ge|\\ne|\\equiv|\\approx|\\in\b|\\subset")


def stated_value(answer: str, reference: str) -> str:
  """The value an answer states where the reference is a value: of `\\sum_{k=1}^{10} k = 55`,
  `3^{100} \\equiv 4 (mod 7)` or `\\approx 3.96` the last side, without its modulus. An answer
  to a reference that is itself a relation (an equation, an inequality) is read whole, as is a
  list of values (`x = 1 \\text{ or } x = 2`, `x = 1, y = 2`)."""
  if _ANY_RELATION.search(reference) or _SEVERAL.search(answer):
    return answer
  # the last relation outside braces (`\\sum_{k=1}` has its `=` in a subscript)
  depth, last = 0, None
  for i, c in enumerate(answer):
    depth += (c == "{") - (c == "}")
    if depth == 0 and (m := _RELATION.match(answer, i)):
      last = m.end()
  if last is None:
    return _MODULUS.sub("", answer) or answer  # `4 \\pmod 7` states 4
  side = _MODULUS.sub("", answer[last:])
  return side if side.strip() else answer


def without_unit(answer: str, reference: str, question: str) -> str:
  """A number with a unit (`300 W`, `\\SI{300}{\\watt}`) for a reference that is a plain number:
  the number in the unit the question asks for ("in kW"), else as written."""
  if not numeric(reference) or _DEGREES.search(answer) or _RADIANS.search(answer):
    return answer
  if not re.search(r"[A-Za-zΩµÅ]", re.sub(r"\\[A-Za-z]+", "", answer)):
    return answer  # no unit symbol: nothing to read
  got = quantity.parse(answer)
  if got is None or got.unit is None or str(got.unit) in ("percent", "dimensionless"):
    return answer
  asked = quantity.implied_unit(question, got)
  value = quantity.converted(got, asked) if asked is not None else got.value
  if value is None:
    return answer
  if value.denominator == 1:
    return str(value)
  return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


_RADIANS = re.compile(r"\s*(?:rad(?:ians?)?|radians?)\s*$")
_DEGREES = re.compile(r"°|\\circ|\\degree|\bdeg(?:rees?)?\b")


def in_reference_angle(answer: str, raw_answer: str, raw_reference: str, question: str) -> str:
  """An angle in the reference's unit: an answer in radians (`\\frac{\\pi}{3}\\ \\text{rad}`) to
  a reference in degrees (a degree mark, or a question that asks for degrees) is read in degrees,
  and an answer in degrees to a reference in radians (a multiple of π without a degree mark) in
  radians."""
  ref_degrees = bool(_DEGREES.search(raw_reference))
  asks_degrees = "\\pi" not in raw_reference and re.search(r"\bdegrees?\b", question, re.I)
  if _RADIANS.search(answer) and (ref_degrees or asks_degrees):
    return f"\\frac{{180}}{{\\pi}}\\cdot\\left({_RADIANS.sub('', answer)}\\right)"
  if _DEGREES.search(raw_answer) and not ref_degrees and "\\pi" in plain_math(raw_reference):
    return f"\\frac{{\\pi}}{{180}}\\cdot\\left({answer}\\right)"
  return _RADIANS.sub("", answer)  # radians are the reference's own unit


def _judged_as_written(boxed: str, ref: str, prompt_text: str | None) -> Score | None:
  """The verdicts reached before math-verify: the answer as written, the question handed back,
  a base numeral, an answer far longer than the reference; None: math-verify decides."""
  bare_ref = last_boxed(ref) if "\\boxed" in ref else ref
  bare_ref = None if bare_ref is None else without_percent(plain_math(bare_ref))
  if bare_ref is not None and _plain(boxed) and _plain(boxed) == _plain(bare_ref):
    return Score(1.0, "correct (typesets as the reference)")
  if bare_ref is not None and (why := hands_back(boxed, bare_ref, prompt_text)):
    return Score(0.0, f"wrong: {boxed[:50]!r} is {why}")
  if bare_ref is not None and (numeral := forms.base_numeral(bare_ref)):  # the base is the answer
    ok = forms.base_numeral(boxed) == numeral or forms.digits_in_named_base(
      boxed, numeral, without_think_tag(prompt_text)
    )
    return Score(1.0 if ok else 0.0, "correct (in its base)" if ok else f"wrong: {boxed[:50]!r}")
  cap = max(4 * len(_plain(bare_ref or ref)), MIN_CAP)
  if len(_plain(boxed)) > cap:  # math-verify would fish a sub-expression out of a long box
    return Score(0.0, f"answer of {len(_plain(boxed))} characters: far longer than the reference")
  return None


def _gold(ref: str, timeout_s: int):
  """(the reference parsed by math-verify, None) or (None, the verifier's failure)."""
  from math_verify import parse  # imported in the verifier process only

  try:
    gold = parse(_gold_text(ref), parsing_timeout=timeout_s, raise_on_error=True)
  except Exception as e:  # noqa: BLE001 - the reference itself: the verifier's failure
    why = f"reference {ref[:50]!r} could not be parsed: {type(e).__name__}"
    return None, Score(0.0, why, failed=True)
  finally:
    _cancel_alarm()
  if not gold:
    return None, Score(0.0, f"reference {ref[:50]!r} could not be parsed", failed=True)
  return gold, None


def _timed_out(t0: float, cpu0: float, use0, timeout_s: int, boxed: str) -> Score:
  """A math-verify timeout: starved (the deadline passed while it waited for a CPU) or the
  answer's fault."""
  wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
  use = resource.getrusage(resource.RUSAGE_SELF)
  preempted = use.ru_nivcsw - use0.ru_nivcsw > use.ru_nvcsw - use0.ru_nvcsw
  if cpu < 0.5 * wall and preempted:
    return Score(0.0, f"starved: {cpu:.1f}s of CPU in {wall:.1f}s", starved=True)
  why = f"response error: math-verify timed out after {timeout_s}s on {boxed[:50]!r}"
  return Score(0.0, why, response_error=True)


def _verified(gold, boxed: str, timeout_s: int, wall_factor: float) -> Score:
  """math-verify's verdict on the boxed answer against the parsed reference."""
  from math_verify import errors, parse, verify  # imported in the verifier process only

  t0, cpu0, use0 = time.monotonic(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
  try:
    wall = max(1, round(timeout_s * wall_factor))  # math-verify's timeouts are wall clock
    pred = parse(f"\\boxed{{{boxed}}}", parsing_timeout=wall, raise_on_error=True)
    if not pred:
      return Score(0.0, f"answer {boxed[:50]!r} could not be parsed")
    ok = verify(gold, pred, timeout_seconds=wall, raise_on_error=True, allow_set_relation_comp=True)
    ok = ok and numbers_agree(gold[0], pred[0])
  except errors.TimeoutException:
    return _timed_out(t0, cpu0, use0, timeout_s, boxed)
  except Exception as e:  # noqa: BLE001 - the answer blew up the parser or sympy
    why = f"response error: math-verify: {type(e).__name__}: {str(e)[:80]}"
    return Score(0.0, why, response_error=True)
  finally:
    _cancel_alarm()
  return Score(1.0 if ok else 0.0, "correct" if ok else f"wrong: {boxed[:50]!r}")


def score(
  response: str,
  reference,
  *,
  timeout_s: int = 5,
  wall_factor: float = 1.0,
  prompt_text: str | None = None,
  **_,
) -> Score:
  """1 when the response's last boxed answer (after the think block) equals the reference by
  math-verify, else 0; a verifier timeout or crash is a marked failure, never a 0."""
  boxed, refused = _final_box(response, prompt_text)
  if refused:
    return refused
  ref = str(reference)
  typed = last_boxed(read(response, prompt_text).answer or "") or ""
  question = without_think_tag(prompt_text) or ""
  boxed = in_reference_angle(stated_value(boxed, plain_math(ref)), typed, ref, question)
  boxed = without_unit(boxed, ref, question)
  judged = _judged_as_written(boxed, ref, prompt_text)
  if judged:
    return judged
  gold, failed = _gold(ref, timeout_s)
  return failed or _verified(gold, boxed, timeout_s, wall_factor)
