r"""Spellings of a math answer that mean one value, rewritten to the form math-verify compares
(`canonical`, applied to the answer and the reference alike by `quantity.plain_math`):

- a trailing period or comma ends the sentence, not the number (`70^\circ.`);
- repeating decimals are the fraction they denote (`0.\overline{36}`, `0.3\dot{6}`, `0.(3)`);
- a base subscript around parentheses is the subscript (`(11001)_2` is `11001_2`);
- a ratio's `\colon` is `:`;
- a number of millions (thousands, billions, trillions) is that number (`3.6 \text{ million}`);
- `a \pm b` (or `\mp`) is the two values `a + b, a - b`;
- inequalities joined by "or" are the union of their intervals (`x < -1 \text{ or } x > 3` is
  `(-\infty,-1) \cup (3,\infty)`);
- a decimal whose last digits repeat, then an ellipsis, is the repeating decimal (`0.4545\ldots` is
  `0.\overline{45}`); an ellipsis after digits that do not repeat is dropped (a truncation);
- set-builder notation is its condition (`\{x \mid 2 < x \le 5\}` is `2 < x \le 5`);
- a vector in unit-vector notation is its components (`5\hat{i} - 2\hat{j} + 2\hat{k}` is
  `(5, -2, 2)`), and a solved system (`x = 2, y = 3`, from any environment) the tuple of its
  values in the variables' alphabetical order;
- a choice's label before its value (`(B) 2.5`) is not part of the value.

The text is read as typeset first (`typeset.answer`): fonts, spacing, `\left`, siunitx and the
rest of what only changes the look are gone before these rules run.
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
_PM = re.compile(r"\\pm(?![A-Za-z])|\\mp(?![A-Za-z])|±|∓")
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


_ELLIPSIS = re.compile(r"(?<![\d.])(\d*)\.(\d+)\s*(?:\\ldots|\.\.\.)\s*")


def _ellipsis(m: re.Match) -> str:
  """`0.4545...` as `0.\\overline{45}`: the shortest block repeated at least twice at the end."""
  whole, digits = m.group(1) or "0", m.group(2)
  for size in range(1, len(digits) // 2 + 1):
    block = digits[-size:]
    if digits.endswith(block * 2):
      fixed = digits[: -2 * size]
      while fixed.endswith(block):
        fixed = fixed[:-size]
      return f"{whole}.{fixed}\\overline{{{block}}}"
  return f"{whole}.{digits}"


_SET_BUILDER = re.compile(
  r"\s*\\\{\s*[a-zA-Z]\s*(?:\\in\s*\\mathbb\{?R\}?\s*)?(?:\\mid|\||:|\\vert)\s*(.+?)\s*\\\}\s*"
)
_UNIT_VECTOR = re.compile(r"\s*([+-]?)\s*([^+\-\\]*?)\s*(?:\\cdot\s*)?\\hat\{([ijk])\}\s*")
_ASSIGNMENT = re.compile(r"\s*([a-zA-Z])\s*=\s*([^=,]+?)\s*")
_LABEL = re.compile(r"\s*\(([A-J])\)\s+(?=\S)")


def _vector(s: str) -> str:
  """`a\\hat{i} + b\\hat{j} + c\\hat{k}` as `(a, b, c)` (a missing component is 0)."""
  if "\\hat{" not in s:
    return s
  terms = list(_UNIT_VECTOR.finditer(s))
  if not terms or "".join(t.group(0) for t in terms).replace(" ", "") != s.replace(" ", ""):
    return s
  parts = {}
  for t in terms:
    coefficient = t.group(2).strip() or "1"
    parts[t.group(3)] = ("-" if t.group(1) == "-" else "") + coefficient
  return "(" + ", ".join(parts.get(axis, "0") for axis in "ijk") + ")"


def _system(s: str) -> str:
  """`x = 2, y = 3` (two or more different variables) as `(2, 3)`, in the variables' order."""
  parts = s.split(",")
  if len(parts) < 2:
    return s
  found = [_ASSIGNMENT.fullmatch(p) for p in parts]
  if None in found or len({m.group(1) for m in found}) != len(found):
    return s
  return "(" + ", ".join(m.group(2) for m in sorted(found, key=lambda m: m.group(1))) + ")"


def canonical(text: str) -> str:
  """`text` with the equivalent spellings above rewritten (see the module docstring)."""
  s = _END.sub("", text)
  s = _LABEL.sub("", s, count=1) if _LABEL.match(s) else s
  if m := _SET_BUILDER.fullmatch(s):
    s = m.group(1)
  s = _ELLIPSIS.sub(_ellipsis, s)
  s = _REPEATING.sub(_repeating, s)
  s = _system(_vector(s))
  s = _unwrapped_bases(s)
  s = s.replace("\\colon", ":")
  s = _SCALED.sub(_scaled, s)
  return _union(_plus_minus(s))


_BASE_NAMES = {2: "binary", 8: "octal", 16: "hexadecimal"}


def digits_in_named_base(text: str, numeral: tuple[int, int], question: str | None) -> bool:
  """Bare digits (`11001`) are the numeral `(value, base)` when the question names the base
  ("in base 2", "base-2", "binary"), as a reader of the question reads them."""
  value, base = numeral
  digits = text.strip()
  if not question or not re.fullmatch(r"[0-9A-Za-z]+", digits):
    return False
  named = re.search(rf"\bbase[\s-]*(?:\$\s*)?{base}\b|_\{{?{base}\}}?", question, re.I)
  if not named and base in _BASE_NAMES:
    named = re.search(rf"\b{_BASE_NAMES[base]}\b", question, re.I)
  try:
    return bool(named) and int(digits, base) == value
  except ValueError:  # a digit the base does not have
    return False
