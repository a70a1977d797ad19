r"""Spellings of a math answer that mean one value, rewritten to the form math-verify compares
(`canonical`, applied to the answer and the reference alike by `quantity.plain_math`):

- a trailing period or comma ends the sentence, not the number (`70^\circ.`);
- repeating decimals are the fraction they denote (`0.\overline{36}`, `0.3\dot{6}`, `0.(3)`);
- a base subscript around parentheses is the subscript (`(11001)_2` is `11001_2`);
- a ratio's `\colon` is `:`;
- a number of millions (thousands, billions, trillions) is that number (`3.6 \text{ million}`);
- `a \pm b` (or `\mp`) is the two values `a + b, a - b`;
- inequalities joined by "or" are the union of their intervals (`x < -1 \text{ or } x > 3` is
  `(-\infty,-1) \cup (3,\infty)`).
"""

from __future__ import annotations

import decimal
import fractions
import re

_END = re.compile(r"(?:\s|\\[,;:! ])*[.,;](?:\s|\\[,;:! ])*$")
_REPEATING = re.compile(
  r"(?<![\d.])(\d*)\.(\d*)(?:\\overline\{(\d+)\}|\\overline(\d)|\\dot\{(\d)\}|\\dot(\d)|\((\d+)\))"
)
_BASE = re.compile(r"\((\w+)\)_(\{\d+\}|\d+)")
_SCALE = {"thousand": 3, "million": 6, "billion": 9, "trillion": 12}
_SCALED = re.compile(
  r"(?<![\d.])(\d+(?:\.\d+)?)\s*(?:\\,|\\ |~)?\s*(?:\\text\{\s*(thousand|million|billion|trillion)"
  r"\s*\}|\b(thousand|million|billion|trillion)\b)"
)
_PM = re.compile(r"\\pm|\\mp|±|∓")
_OR = re.compile(r"\\text\{\s*or\s*\}|\\(?:lor|vee)\b|\bor\b")
_BOUND = r"(-?\s*(?:\\infty|\d+(?:\.\d+)?|\\frac\{[^{}]*\}\{[^{}]*\}|\\sqrt\{[^{}]*\}|\w))"
_LESS = r"(<|\\le(?:q|qslant)?\b|≤|\\lt\b)"
_GREATER = r"(>|\\ge(?:q|qslant)?\b|≥|\\gt\b)"
_ONE_SIDED = re.compile(rf"\s*([a-zA-Z])\s*(?:{_LESS}|{_GREATER})\s*{_BOUND}\s*")
_TWO_SIDED = re.compile(rf"\s*{_BOUND}\s*{_LESS}\s*([a-zA-Z])\s*{_LESS}\s*{_BOUND}\s*")


def _repeating(m: re.Match) -> str:
  whole, fixed = m.group(1) or "0", m.group(2)
  cycle = next(g for g in m.groups()[2:] if g)
  value = fractions.Fraction(int(whole + fixed + cycle) - int(whole + fixed or "0"))
  value /= (10 ** len(cycle) - 1) * 10 ** len(fixed)
  return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def _scaled(m: re.Match) -> str:
  exp = _SCALE[m.group(2) or m.group(3)]
  return format(decimal.Decimal(m.group(1)).scaleb(exp).normalize(), "f")


def _plus_minus(s: str) -> str:
  if len(_PM.findall(s)) != 1 or "," in s:
    return s
  m = _PM.search(s)
  sign = "+-" if m.group(0) in ("\\pm", "±") else "-+"
  return f"{s[: m.start()]}{sign[0]}{s[m.end() :]}, {s[: m.start()]}{sign[1]}{s[m.end() :]}"


def _interval(part: str) -> str | None:
  m = _ONE_SIDED.fullmatch(part)
  if m:
    _, less, greater, bound = m.groups()
    strict = (less or greater) in ("<", ">", "\\lt", "\\gt")
    if less:
      return f"(-\\infty,{bound}{')' if strict else ']'}"
    return f"{'(' if strict else '['}{bound},\\infty)"
  m = _TWO_SIDED.fullmatch(part)
  if m:
    low, op1, _, op2, high = m.groups()
    return f"{'(' if op1 == '<' else '['}{low},{high}{')' if op2 == '<' else ']'}"
  return None


def _union(s: str) -> str:
  parts = _OR.split(s)
  if len(parts) < 2:
    return s
  intervals = [_interval(p) for p in parts]
  return s if None in intervals else " \\cup ".join(intervals)


_NUMERAL = re.compile(r"\s*([0-9A-Za-z]+)_\{?(\d+)\}?\s*")


def _unwrapped_bases(text: str) -> str:
  """`(11001)_2` as `11001_2`: the parentheses around a numeral do not change its base."""
  return _BASE.sub(lambda m: f"{m.group(1)}_{m.group(2)}", text)


def base_numeral(text: str) -> tuple[int, int] | None:
  """(value, base) of a numeral with a base subscript (`11001_2`, `(11001)_2`, `1A_{16}`); None
  for anything else. math-verify drops subscripts: `11001_3` would equal `11001_2`."""
  m = _NUMERAL.fullmatch(_unwrapped_bases(text))
  if not m or not 2 <= int(m.group(2)) <= 36 or not re.search(r"\d", m.group(1)):
    return None
  try:
    return int(m.group(1), int(m.group(2))), int(m.group(2))
  except ValueError:  # a digit the base does not have
    return None


def canonical(text: str) -> str:
  """`text` with the equivalent spellings above rewritten (see the module docstring)."""
  s = _END.sub("", text)
  s = _REPEATING.sub(_repeating, s)
  s = _unwrapped_bases(s)
  s = s.replace("\\colon", ":")
  s = _SCALED.sub(_scaled, s)
  return _union(_plus_minus(s))
