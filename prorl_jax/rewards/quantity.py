r"""Numbers and physical quantities as people write them in answers.

`plain_math(text)` rewrites the spellings a careful grader reads past into the form math-verify
parses: money (`\$12.50`), thousands separators (`3\,600`, `3{,}600`, `1,234,567`), scientific
notation (`1.5e8` is 1.5 × 10^8, never 1.5·e·8), degrees (`45°`, `45\degree`), Unicode minus,
times and middle dot.

`parse(text)` reads a short physical answer (`2\ \text{s}`, `12 J`, `3.0\times10^{8}\,\mathrm{m/s}`,
`5\,\Omega`, `20^\circ\text{C}`) as (value, unit) with the unit a pint unit, or None when the text
is not one number with an optional unit. `same_quantity(got, ref)` compares two parsed
quantities the way the reference decides: converted to the reference's unit (an answer in another
unit of the same dimension is converted; another dimension is wrong; an answer without a unit is
read in the reference's unit); a reference written as a plain integer needs that integer, any
other within REL_TOL of it (0 equals only 0).
"""

from __future__ import annotations

import decimal
import fractions
import functools
import re
import unicodedata
from typing import NamedTuple

from prorl_jax.rewards import forms, typeset

REL_TOL = fractions.Fraction(1, 100)  # answers round: 9.8 for 9.81, 0.5 for 0.50

_WRAPPERS = re.compile(
  r"\\(?:text|mathrm|textrm|mathit|textit|operatorname|textbf|mathbf|boldsymbol|rm|mbox)\s*\{([^{}]*)\}"
)
_SPACES = re.compile(r"\\[,;:! ]|~|\\quad|\\qquad|[\u00a0\u2009\u202f\u2002\u2003]")
_DEGREE = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree|°|º")
_SCI = re.compile(r"(?<![\w.])(\d+(?:\.\d*)?|\.\d+)[eE]([+-]?\d+)(?![\w.])")
_THOUSANDS = re.compile(r"(?<![\d.])\d{1,3}(?:(?:\\,|\{,\}|\\ |\u2009|\u202f)\d{3})+(?![\d])")
_COMMA_GROUPS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def _join_groups(m: re.Match) -> str:
  return re.sub(r"\\,|\{,\}|\\ |\u2009|\u202f", "", m.group(0))


_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻", "0123456789+-")
_SUPERSCRIPTS = re.compile("[⁺⁻]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+[⁺⁻]?|[⁺⁻]")


def unicode_math(text: str) -> str:
  """Unicode as LaTeX writes it: superscript digits an exponent (`10⁻⁷` is `10^{-7}`, `m²` is
  `m^{2}`), then NFKC (`℃` is `°C`, the ohm sign is Ω, `½` is 1/2), the minus sign a hyphen,
  `√3` and `π` as LaTeX writes them."""
  s = _SUPERSCRIPTS.sub(lambda m: "^{" + m.group(0).translate(_SUPERSCRIPT) + "}", text)
  s = unicodedata.normalize("NFKC", s).replace("\u2044", "/")
  s = re.sub(r"√\s*(\d+|\w|\([^()]*\))", lambda m: "\\sqrt{" + m.group(1).strip("()") + "}", s)
  return s.replace("\u2212", "-").replace("π", "\\pi ")


def plain_math(text: str) -> str:
  """A math answer (or reference) with money signs, digit-group separators, e-notation and
  degree marks rewritten as math-verify reads them (see the module docstring)."""
  s = typeset.answer(unicode_math(text)).replace("×", r"\times ").replace("·", r"\cdot ")
  s = re.sub(r"\\\$|\\text\{\s*\\?\$\s*\}|\\textdollar|\$", "", s)
  s = _THOUSANDS.sub(_join_groups, s)
  if _COMMA_GROUPS.fullmatch(s.strip()):  # one number with comma groups: 1,234,567
    s = s.replace(",", "")
  s = _SCI.sub(lambda m: f"{m.group(1)}\\times10^{{{int(m.group(2))}}}", s)
  s = _DEGREE.sub("", s)
  s = re.sub(r"\\text\{\s*(?:degrees?|deg)\s*\}|\s+degrees?\b", "", s)
  return forms.canonical(s.strip())


@functools.lru_cache(maxsize=1)
def registry():
  """pint's unit registry (loaded once, in the verifier pool process)."""
  import pint  # lazy: slow to import, loaded once in the pool process (mcq.warm)

  return pint.UnitRegistry(autoconvert_offset_to_baseunit=True)


_LATEX_UNITS = (
  (r"\\Omega|Ω", "ohm"),
  (r"\\mu\s*|μ|µ", "u"),
  (r"\\AA|Å", "angstrom"),
  (r"\\%|%", "percent"),
  (r"\\cdot|\\times|\*", "*"),
  (r"\\(?:d|t)?frac\{([^{}]*)\}\{([^{}]*)\}", r"(\1)/(\2)"),
)
_NUMBER = (
  r"[+-]?(?:\d+/[1-9]\d*(?![\d.])|\d+(?:\.\d*)?|\.\d+)(?:\s*(?:\\times|\\cdot|\*|x)\s*10\s*\^\s*\{?\s*[+-]?\d+\s*\}?"
  r"|[eE][+-]?\d+)?"
)
_POWER = re.compile(r"\^\s*\{\s*([+-]?\d+)\s*\}|\^\s*([+-]?\d)")
_QUANTITY = re.compile(rf"\s*({_NUMBER})\s*(.*?)\s*")
_EXP = re.compile(r"(?:\\times|\\cdot|\*|x)\s*10\s*\^\s*\{?\s*([+-]?\d+)\s*\}?|[eE]([+-]?\d+)")


def _value(token: str) -> fractions.Fraction:
  m = _EXP.search(token)
  base = token[: m.start()] if m else token
  exp = int(m.group(1) or m.group(2)) if m else 0
  if abs(exp) > 400:
    raise ValueError("exponent out of range")
  return fractions.Fraction(base.strip()) * fractions.Fraction(10) ** exp


def _unit_text(text: str) -> str:
  s = _DEGREE.sub(" degree ", text)
  s = _POWER.sub(lambda m: f"**{m.group(1) or m.group(2)}", s)  # before the braces go
  for _ in range(3):  # nested wrappers: \mathrm{\mu m}
    s = _WRAPPERS.sub(r"\1", s)
  for pattern, repl in _LATEX_UNITS:
    s = re.sub(pattern, repl, s)
  s = s.replace("{", "").replace("}", "").replace("\\", "")
  s = re.sub(r"\bdegree\s+(C|F|K)\b", lambda m: {"C": "degC", "F": "degF", "K": "K"}[m.group(1)], s)
  s = re.sub(r"\bdegrees?\b", "degree", s)
  return " ".join(s.split())


_VALUE_SIDE = re.compile(r"\\approx|≈|\\simeq|(?<![<>!=])=(?!=)")


def value_side(text: str) -> str:
  """The value an answer states: of `v = 14 m/s` or `x \\approx 3.2` the side after the last
  `=` or `\\approx` (the whole text when there is none, or nothing after it)."""
  side = _VALUE_SIDE.split(text)[-1]
  return side if side.strip() else text


class Quantity(NamedTuple):
  value: fractions.Fraction
  unit: object  # a pint unit, or None for a plain number
  integer: bool  # written as a plain integer (no decimal point, no exponent)


def parse(text: str) -> Quantity | None:
  """The quantity an answer states when it is one number with an optional unit; None for
  anything else (an expression, words, two numbers)."""
  s = _plain_quantity(text)
  m = _QUANTITY.fullmatch(s)
  if not m:
    return None
  try:
    value = _value(m.group(1))
  except (ValueError, ZeroDivisionError):
    return None
  integer = re.fullmatch(r"[+-]?\d+", m.group(1)) is not None
  unit_text = _unit_text(m.group(2))
  if not unit_text:
    return Quantity(value, None, integer)
  try:
    unit = registry().parse_units(unit_text)
  except Exception:  # noqa: BLE001 - pint raises many kinds for text that is not a unit
    return None
  return Quantity(value, unit, integer)


def _plain_quantity(text: str) -> str:
  s = typeset.answer(unicode_math(text.strip()))
  s = _SPACES.sub(" ", s.replace("×", r"\times ").replace("·", r"\cdot "))
  s = re.sub(r"\\\$|\\text\{\s*\\?\$\s*\}", "", s)
  s = _THOUSANDS.sub(_join_groups, s)
  s = re.sub(r"^([+-]?)\\frac\{(\d+)\}\{([1-9]\d*)\}", r"\1\2/\3", s)  # 3/2 is a number
  m = re.match(r"([+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?)(\s.*|[^\d,].*)?$", s)
  if m:
    s = m.group(1).replace(",", "") + (m.group(2) or "")
  return s.rstrip(".").strip()


def converted(got: Quantity, unit) -> fractions.Fraction | None:
  """`got`'s value in `unit` (to 12 significant digits); None for another dimension."""
  try:
    magnitude = fractions.Fraction(registry().Quantity(got.value, got.unit).to(unit).magnitude)
  except Exception:  # noqa: BLE001 - another dimension (pint's DimensionalityError) or overflow
    return None
  # pint's factors are floats (prefixes, offsets): rounded to 12 significant digits, beyond any
  # answer's precision, so 5.0e-7 m is 500 nm exactly and 0.0121 kJ stays 12.1 J
  with decimal.localcontext(decimal.Context(prec=12, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)):
    return fractions.Fraction(
      decimal.Decimal(magnitude.numerator) / decimal.Decimal(magnitude.denominator)
    )


def same_quantity(got: Quantity, ref: Quantity, implied=None) -> bool:
  """`got` equals `ref` in the reference's unit, converted exactly from any unit of the same
  dimension: exactly when the reference is a plain integer (`12 J` is `0.012 kJ`, never
  `0.0121 kJ`), else within REL_TOL of it (0 only equals 0). An answer without a unit is read in
  the unit the question asks for (`implied`, `implied_unit`); where it asks for none, a bare number
  is not a quantity with a unit (`5` is not `5 mA`: it could as well be 5 A)."""
  if got.unit is None and ref.unit is not None:
    if implied is None:
      return False
    got = got._replace(unit=implied)
  gv, rv = got.value, ref.value
  if got.unit is not None and ref.unit is not None and got.unit != ref.unit:
    gv = converted(got, ref.unit)
    if gv is None:
      return False
  elif got.unit is not None and ref.unit is None and str(got.unit) == "percent":
    return False  # 7% is not the plain number 7 (nor 0.07: the question asks for one scale)
  if ref.integer:
    return gv == rv
  if rv == 0:
    return gv == 0
  return abs(gv - rv) <= REL_TOL * abs(rv)


_ASKED = re.compile(
  r"\b(?:in(?:\s+(?:units|terms)\s+of)?|how\s+many|how\s+much\s+in)\s+"
  r"((?:\\(?:text|mathrm)\s*\{[^{}]{1,30}\}|[^\s,;:?!()<>]{1,30})(?:\s+per\s+[^\s,;:?!()<>]{1,30})?)"
  r"|[(\[]\s*((?:\\(?:text|mathrm)\s*\{[^{}]{1,30}\}|[^\s()\[\]]{1,20}))\s*[)\]]",
  re.I,
)
_NOT_UNITS = frozenset({"a", "an", "the"})  # "in a circle": pint reads `a` as a year


def implied_unit(prompt_text: str | None, ref: Quantity):
  """The unit the question asks its answer in ("in mA", "in units of m/s", "how many seconds",
  "(in J)"), when it is of the reference's dimension; None when the question names none."""
  if not prompt_text or ref.unit is None:
    return None
  want = registry().Quantity(1, ref.unit).dimensionality
  found = None
  for m in _ASKED.finditer(prompt_text[-4000:]):
    text = _unit_text((m.group(1) or m.group(2)).strip().rstrip(".").strip("$"))
    if text in _NOT_UNITS:  # case kept: `A` is an ampere
      continue
    try:
      unit = registry().parse_units(text.replace(" per ", " / "))
    except Exception:  # noqa: BLE001 - pint raises many kinds for words that are not units
      continue
    if str(unit) != "dimensionless" and registry().Quantity(1, unit).dimensionality == want:
      found = unit
  return found
