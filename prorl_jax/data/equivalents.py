r"""Equivalent forms of a correct answer, and the near misses of it, generated per domain: what an
honest reasoning model may write for the same value, and what changes the value. The property
tests draw values and require every form to earn full credit and every near miss none.

- `number_forms(value)`: an exact rational written as integers and decimals with digit groups,
  fractions (`\frac`, `\dfrac`, `p/q`, Unicode), mixed numbers, repeating decimals, a closing
  period, `\text{}`, e-notation and "million" where exact.
- `number_misses(value)`: a wrong digit, off by one, the sign flipped, ten times, a numerator
  or denominator changed, a repeating block changed.
- `interval_forms` / `interval_misses`: an interval or a union as inequalities joined by "or",
  set notation, `x \in`; a swapped bracket or bound.
- `roots_forms` / `roots_misses`: two roots `a ± b` as `\pm`, the two values in either order,
  `x = r_1 \text{ or } x = r_2`; one root only, the sign of b changed.
- `quantity_forms` / `quantity_misses` (STEM): a value and unit in other spellings, prefixes
  and Unicode; 5% off in another unit, another dimension, the bare number.
- `angle_forms` / `angle_misses`: an angle in every degree spelling (`^\circ`, `°`, `\degree`,
  `\ang`) and in radians with its unit; another angle in the same spellings.
- `vector_forms` / `vector_misses`: a tuple as `\langle\rangle`, unit vectors (`\mathbf{i}`,
  `\hat{\imath}`), `\left(\right)`; one component changed, two swapped.
- `system_forms` / `system_misses`: a solved system as assignments, in `cases` and `aligned`, in
  either order; the values swapped, one changed.
- `set_forms` / `set_misses`: an interval in set-builder notation; a bound's strictness changed.
- `choice_forms` / `choice_misses` (multiple choice): a letter in a box, as text, with its
  option's text, bold, in a table's last row, alone on the last line; another letter, two.
- `statement_forms`: a value stated at the end of a computation (`\sum_{k=1}^{n} k = v`,
  `\approx v`, `\equiv v \pmod{m}`).
- `typeset_alike(tex)`: LaTeX spellings that typeset to the same text (spacing commands, fonts,
  `\dfrac`/`\tfrac`, `\left`/`\right`, `\displaystyle`, braces), applied to every form above.
- `WRAPPERS`: the final-answer templates of reasoning models (boxed, "The answer is", bold).
"""

from __future__ import annotations

import fractions
import math
import re

WRAPPERS = (
  "<think>\nworking\n</think>\n\nThe final answer is $\\boxed{{{x}}}$.",
  "<think>\nworking\n</think>\n\n**Final Answer**\n\\[\n\\boxed{{{x}}}\n\\]",
  "<think>\nworking\n</think>\n\nTherefore, the answer is \\(\\boxed{{{x}}}\\).",
)


def _grouped(n: int, sep: str) -> str:
  s = f"{abs(n):,}".replace(",", sep)
  return ("-" if n < 0 else "") + s


def _decimal(v: fractions.Fraction) -> str | None:
  """The terminating decimal of v, or None."""
  d = v.denominator
  for p in (2, 5):
    while d % p == 0:
      d //= p
  if d != 1:
    return None
  digits = 0
  while (v * 10**digits).denominator != 1:
    digits += 1
  return f"{float(v):.{digits}f}" if abs(v) < 10**15 else None


def _repeating(v: fractions.Fraction) -> str | None:
  """`0.3\\overline{6}` for 11/30 (a non-terminating decimal), or None."""
  if _decimal(v) is not None or v < 0:
    return None
  whole, rest = divmod(v.numerator, v.denominator)
  digits, seen, k = [], {}, rest
  while k and k not in seen and len(digits) < 40:
    seen[k] = len(digits)
    k *= 10
    digits.append(str(k // v.denominator))
    k %= v.denominator
  if not k or k not in seen:
    return None
  start = seen[k]
  return f"{whole}.{''.join(digits[:start])}\\overline{{{''.join(digits[start:])}}}"


def number_forms(v: fractions.Fraction) -> list[str]:
  """Ways to write the exact value v (see the module docstring)."""
  out = []
  sign = "-" if v < 0 else ""
  if v.denominator == 1:
    n = v.numerator
    out += [str(n), f"{n}.0", f"\\text{{{n}}}", f"{n}."]
    if abs(n) >= 1000:
      out += [_grouped(n, "{,}"), _grouped(n, "\\,"), _grouped(n, ",")]
    if n and n % 100000 == 0:
      out.append(f"{sign}{abs(n) / 10**6:g} \\text{{ million}}")
    if n and n % 10 == 0 and abs(n) >= 10**4:
      exp = len(str(abs(n))) - 1
      out.append(f"{sign}{abs(n) / 10**exp:g}\\times 10^{{{exp}}}")
    return out
  p, q = abs(v.numerator), v.denominator
  out += [f"{sign}\\frac{{{p}}}{{{q}}}", f"{sign}\\dfrac{{{p}}}{{{q}}}", f"{sign}{p}/{q}"]
  out.append(f"\\frac{{{-p if sign else p}}}{{{q}}}")
  if p > q:
    out.append(f"{sign}{p // q}\\frac{{{p % q}}}{{{q}}}")
  dec = _decimal(v)
  if dec:
    out += [dec, dec + "."]
  rep = _repeating(v)
  if rep:
    out.append(rep)
  return out


def number_misses(v: fractions.Fraction) -> list[str]:
  """Values that differ from v, written plainly."""
  out = [str(w) for w in dict.fromkeys((v + 1, v - 1, v * 10, -v)) if w != v]
  if v.denominator == 1:
    s = str(abs(v.numerator))
    if len(s) > 1 and s[-1] != s[-2]:
      out.append(("-" if v < 0 else "") + s[:-2] + s[-1] + s[-2])  # two digits swapped
  else:
    p, q = v.numerator, v.denominator
    out += [f"\\frac{{{p + 1}}}{{{q}}}", f"\\frac{{{p}}}{{{q + 1}}}"]
    if abs(p) != q:
      out.append(f"\\frac{{{q}}}{{{p}}}")
    rep = _repeating(v)
    if rep:
      cycle = rep[rep.index("{") + 1 : -1]
      changed = cycle[:-1] + str((int(cycle[-1]) + 1) % 10)
      out.append(rep.replace(f"{{{cycle}}}", f"{{{changed}}}"))
  return out


def interval_forms(lo: int, hi: int) -> tuple[str, list[str]]:
  """(the union `(-\\infty,lo) \\cup (hi,\\infty)` as a reference, its equivalent spellings)."""
  ref = f"(-\\infty,{lo})\\cup({hi},\\infty)"
  return ref, [
    f"x < {lo} \\text{{ or }} x > {hi}",
    f"x<{lo} \\text{{ or }} x>{hi}",
    f"x < {lo} or x > {hi}",
    f"x > {hi} \\text{{ or }} x < {lo}",
    f"(-\\infty, {lo}) \\cup ({hi}, \\infty)",
    f"x \\in (-\\infty,{lo})\\cup({hi},\\infty)",
  ]


def interval_misses(lo: int, hi: int) -> list[str]:
  return [
    f"x \\le {lo} \\text{{ or }} x > {hi}",
    f"x < {lo} \\text{{ or }} x > {hi + 1}",
    f"x > {lo} \\text{{ or }} x < {hi}",
    f"x < {lo}",
    f"({lo},{hi})",
  ]


def roots_forms(a: int, b: int, c: int) -> tuple[str, list[str]]:
  """((a ± √b)/c as its two roots, their equivalent spellings); b is not a square."""
  r1, r2 = f"\\frac{{{a}+\\sqrt{{{b}}}}}{{{c}}}", f"\\frac{{{a}-\\sqrt{{{b}}}}}{{{c}}}"
  return f"{r1}, {r2}", [
    f"\\frac{{{a} \\pm \\sqrt{{{b}}}}}{{{c}}}",
    f"{r2}, {r1}",
    f"x = {r1} \\text{{ or }} x = {r2}",
    *([f"\\frac{{{a} \\pm \\sqrt {b}}}{{{c}}}"] if b < 10 else []),
  ]


def roots_misses(a: int, b: int, c: int) -> list[str]:
  return [
    f"\\frac{{{a}+\\sqrt{{{b}}}}}{{{c}}}",
    f"\\frac{{{a} \\pm \\sqrt{{{b + 1}}}}}{{{c}}}",
    f"\\frac{{{-a} \\pm \\sqrt{{{b}}}}}{{{c}}}" if a else f"\\frac{{1 \\pm \\sqrt{{{b}}}}}{{{c}}}",
  ]


# (unit, the same unit spelled otherwise, (a prefixed unit, its factor), another dimension)
UNITS = {
  "J": (["\\text{ J}", "\\,\\mathrm{J}", " \\text{joules}"], ("kJ", 1000), "W"),
  "m/s": (["\\text{ m/s}", "\\,\\mathrm{m\\,s^{-1}}", " m s⁻¹"], ("km/s", 1000), "m/s^2"),
  "A": (["\\text{ A}", "\\,\\mathrm{A}", " amperes"], ("mA", fractions.Fraction(1, 1000)), "V"),
  "ohm": (["\\,\\Omega", " Ω", "\\text{ ohm}"], ("kΩ", 1000), "F"),
  "N": (["\\text{ N}", "\\,\\mathrm{N}", " newtons"], ("kN", 1000), "J"),
}


def _value_text(v: fractions.Fraction) -> str:
  return str(v.numerator) if v.denominator == 1 else (_decimal(v) or f"{float(v):.12g}")


def quantity_forms(v: fractions.Fraction, unit: str) -> tuple[str, list[str]]:
  """(the reference `v unit`, the same quantity written otherwise)."""
  spelled, (prefixed, factor), _ = UNITS[unit]
  ref = f"{_value_text(v)} {unit if unit != 'ohm' else 'Ω'}"
  out = [f"{_value_text(v)}{s}" for s in spelled]
  out.append(f"{_value_text(v / factor)} {prefixed}")
  out += [
    f"\\SI{{{_value_text(v)}}}{{{SIUNITX[unit]}}}",
    f"\\qty{{{_value_text(v)}}}{{{SIUNITX[unit]}}}",
  ]
  return ref, out


def quantity_misses(v: fractions.Fraction, unit: str) -> list[str]:
  """The value 5% off in the prefixed unit, in another dimension, bare, and ten times off."""
  _, (prefixed, factor), other = UNITS[unit]
  off = v * fractions.Fraction(105, 100)  # beyond the 1% a decimal reference allows
  u = unit if unit != "ohm" else "Ω"
  return [f"{_value_text(off / factor)} {prefixed}", f"{_value_text(v)} {other}",
          _value_text(v), f"{_value_text(v * 10)} {u}"]  # fmt: skip


def typeset_alike(tex: str) -> list[str]:
  """Spellings of `tex` that a typesetter prints the same (the rule `rewards.typeset` reads by)."""
  out = [f"\\displaystyle {tex}", f"{{{tex}}}", f"\\, {tex}\\;"]
  if "\\frac" in tex:
    out += [tex.replace("\\frac", "\\dfrac"), tex.replace("\\frac", "\\tfrac")]
  if tex.startswith("(") and tex.endswith(")") and tex.count("(") == 1:
    out.append(f"\\left({tex[1:-1]}\\right)")
  if ", " in tex:
    out += [tex.replace(", ", ",\\ "), tex.replace(", ", ",\\,"), tex.replace(", ", ",~")]
  if re.fullmatch(r"-?\d+", tex):
    out += [f"\\mathrm{{{tex}}}", f"\\text{{{tex}}}", f"\\mathbf{{{tex}}}"]
  return out


def angle_forms(degrees: int) -> tuple[str, list[str]]:
  """(`degrees` as a degree reference, its spellings in degrees and in radians with a unit)."""
  turn = fractions.Fraction(degrees, 180)
  p, q = turn.numerator, turn.denominator
  pi = "\\pi" if p == 1 else f"{p}\\pi"
  rad = pi if q == 1 else f"\\frac{{{pi}}}{{{q}}}"
  return f"{degrees}^\\circ", [
    f"{degrees}^{{\\circ}}", f"{degrees}°", f"{degrees}\\degree", f"\\ang{{{degrees}}}",
    f"{degrees}\\,^{{\\circ}}", f"{degrees} \\text{{ degrees}}", f"{degrees}^\\circ",
    f"{rad}\\ \\text{{rad}}", f"{rad} \\text{{ radians}}", f"{rad}\\,\\mathrm{{rad}}",
  ]  # fmt: skip


def angle_misses(degrees: int) -> list[str]:
  other = degrees + 15
  turn = fractions.Fraction(other, 180)
  rad = f"\\frac{{{turn.numerator}\\pi}}{{{turn.denominator}}}"
  return [f"{other}^\\circ", f"{degrees + 1}°", f"{rad}\\ \\text{{rad}}"]


def _signed(c: int, unit: str, first: bool) -> str:
  sign = "-" if c < 0 else ("" if first else "+")
  mag = "" if abs(c) == 1 else str(abs(c))
  return f"{sign} {mag}{unit}".strip() if not first else f"{sign}{mag}{unit}"


def vector_forms(a: int, b: int, c: int) -> tuple[str, list[str]]:
  """(the tuple `(a, b, c)`, the same vector in other notations); a, b, c are non-zero."""

  def units(fmt):
    return " ".join(
      _signed(v, fmt.format(k), i == 0) for i, (v, k) in enumerate(zip((a, b, c), "ijk"))
    )

  return f"({a}, {b}, {c})", [
    f"\\langle {a}, {b}, {c} \\rangle", f"\\left\\langle {a},{b},{c}\\right\\rangle",
    units("\\mathbf{{{}}}"), units("\\hat{{{}}}"), units("\\boldsymbol{{{}}}"), f"({a},{b},{c})",
    f"\\left( {a}, {b}, {c} \\right)", f"⟨{a}, {b}, {c}⟩",
  ]  # fmt: skip


def vector_misses(a: int, b: int, c: int) -> list[str]:
  swapped = f"({b}, {a}, {c})" if a != b else f"({a}, {b}, {-c})"
  return [
    f"\\langle {a}, {b}, {c + 1} \\rangle",
    swapped,
    f"{a}\\mathbf{{i}} + {b}\\mathbf{{j}}",
    f"\\langle {-a}, {b}, {c} \\rangle",
  ]


def system_forms(x: int, y: int) -> tuple[str, list[str]]:
  """(the solution `(x, y)`, the system solved in the ways it is written)."""
  return f"({x}, {y})", [
    f"x = {x}, y = {y}", f"y = {y}, x = {x}", f"x={x},\\ y={y}",
    f"\\begin{{cases}} x = {x} \\\\ y = {y} \\end{{cases}}",
    f"\\begin{{aligned}} x &= {x} \\\\ y &= {y} \\end{{aligned}}",
    f"\\left\\{{\\begin{{array}}{{l}} x = {x} \\\\ y = {y} \\end{{array}}\\right.",
    f"({x}, {y})",
  ]  # fmt: skip


def system_misses(x: int, y: int) -> list[str]:
  swapped = f"x = {y}, y = {x}" if x != y else f"x = {x}, y = {y + 1}"
  return [
    swapped,
    f"x = {x}, y = {y + 1}",
    f"\\begin{{cases}} x = {x + 2} \\\\ y = {y} \\end{{cases}}",
  ]


def set_forms(lo: int, hi: int) -> tuple[str, list[str]]:
  """(the interval `(lo, hi]`, set-builder spellings of it)."""
  cond = f"{lo} < x \\le {hi}"
  return f"({lo}, {hi}]", [
    f"\\{{x \\mid {cond}\\}}", f"\\{{x : {lo} < x \\leq {hi}\\}}",
    f"\\{{ x \\in \\mathbb{{R}} \\mid {cond} \\}}", f"\\left\\{{x \\mid {cond}\\right\\}}",
    f"\\{{x \\,|\\, {cond}\\}}",
  ]  # fmt: skip


def set_misses(lo: int, hi: int) -> list[str]:
  return [f"\\{{x \\mid {lo} \\le x \\le {hi}\\}}", f"\\{{x \\mid {lo} < x < {hi}\\}}",
          f"\\{{x \\mid {lo} < x \\le {hi + 1}\\}}"]  # fmt: skip


# How a reasoning model states a choice: {k} is the letter, {t} the option's text.
CHOICE_SPELLINGS = (
  "The answer is $\\boxed{{{k}}}$.", "$\\boxed{{\\text{{{k}}}}}$",
  "$\\boxed{{\\text{{Option {k}}}}}$",
  "$\\boxed{{\\textbf{{({k})}}}}$", "$\\boxed{{\\textbf{{({k})}}\\ {t}}}$", "**Answer: {k}**",
  "**Answer:** ({k}) {t}", "| Step | Result |\n|---|---|\n| **Answer** | **{k}** |",
  "So the work is {t}.\n\n**({k}) {t}**", "Therefore:\n\n({k})", "The correct option is {k}.",
  "Answer: \\textbf{{({k})}}\\ {t}",
)  # fmt: skip


def choice_forms(letter: str, text: str) -> list[str]:
  """The letter `letter` (its option reads `text`) in every spelling of CHOICE_SPELLINGS."""
  return [f.format(k=letter, t=text) for f in CHOICE_SPELLINGS]


def choice_misses(letter: str, text: str, other: str) -> list[str]:
  """Another letter in every spelling, and two letters at once."""
  return [f.format(k=other, t=text) for f in CHOICE_SPELLINGS] + [
    f"The answer is $\\boxed{{{letter} \\text{{ or }} {other}}}$.",
    f"({other}) x\n({letter}) {text}\n(E) y",
  ]


def statement_forms(v: int) -> list[str]:
  """`v` stated as the last value of a computation."""
  n = (math.isqrt(8 * v + 1) - 1) // 2 if v > 0 else 0
  out = [
    f"S = {v}",
    f"\\approx {v}",
    f"N \\equiv {v} \\pmod{{{abs(v) + 7}}}" if v >= 0 else f"x = {v}",
  ]
  if v > 0 and n * (n + 1) // 2 == v:
    out.append(f"\\sum_{{k=1}}^{{{n}}} k = {v}")
  return out


SIUNITX = {
  "J": "\\joule",
  "m/s": "\\meter\\per\\second",
  "A": "\\ampere",
  "ohm": "\\ohm",
  "N": "\\newton",
}
