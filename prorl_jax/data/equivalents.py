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
- `WRAPPERS`: the final-answer templates of reasoning models (boxed, "The answer is", bold).
"""

from __future__ import annotations

import fractions

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
  return ref, out


def quantity_misses(v: fractions.Fraction, unit: str) -> list[str]:
  """The value 5% off in the prefixed unit, in another dimension, bare, and ten times off."""
  _, (prefixed, factor), other = UNITS[unit]
  off = v * fractions.Fraction(105, 100)  # beyond the 1% a decimal reference allows
  u = unit if unit != "ohm" else "Ω"
  return [f"{_value_text(off / factor)} {prefixed}", f"{_value_text(v)} {other}",
          _value_text(v), f"{_value_text(v * 10)} {u}"]  # fmt: skip
