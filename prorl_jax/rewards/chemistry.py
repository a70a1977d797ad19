r"""Chemical formulas read as a chemist reads them: by the count of each element and the charge
(molmass parses the formula), never as algebra (math-verify reads `H_2O` as a product of symbols,
`CO` as C times O and `Co` as C times o).

`formula(text)` is the composition of a formula written plainly, in LaTeX or with Unicode
subscripts (`H2O`, `H_2O`, `\mathrm{H_{2}O}`, `\ce{H2O}`, `H₂O`, `SO_4^{2-}`, `Ca(OH)_2`,
`CuSO4·5H2O`), or None for anything that is not one (a word, a number, a coefficient in front:
`2H2O` is an amount, not a formula). `looks_chemical(ref)` decides that a reference is a formula:
it parses, and has a count, a group, a charge or two elements (`NaCl`), so `No` and `Yes` stay
words.
"""

from __future__ import annotations

import functools
import re

from prorl_jax.rewards.quantity import unicode_math

_WRAP = re.compile(r"\\(?:ce|mathrm|text|rm|mathbf|textbf)\s*")
_CHARGE = re.compile(r"\^\(?\s*(\d*)\s*([+-])\s*\)?$|\^\(?\s*([+-])\s*(\d*)\s*\)?$")


@functools.cache
def _formula_class():
  import molmass  # lazy: loaded in the pool process by `mcq.warm` for formula references

  return molmass.Formula


def _plain(text: str) -> str | None:
  s = unicode_math(text).strip().strip("$").strip().rstrip(".").strip()  # `SO₄²⁻`: ^{2-}
  s = re.sub(r"\^\s*\{([^{}]*)\}", r"^(\1)", s)  # the charge's braces, before the others go
  s = _WRAP.sub("", s).replace("{", "").replace("}", "")
  s = s.replace("\\cdot", "·").replace("\\bullet", "·").replace("*", "·").replace(" ", "")
  charge = ""
  m = _CHARGE.search(s)
  if m:
    digits, sign = (m.group(1), m.group(2)) if m.group(2) else (m.group(4), m.group(3))
    s, charge = s[: m.start()], f"{digits or ''}{sign}"
  s = s.replace("_", "")
  if not re.fullmatch(r"(?:[A-Z][a-z]?|\d+|[()\[\]·.])+", s) or s[0].isdigit():
    return None
  s = s.replace("·", ".")  # a hydrate's dot, as molmass writes it
  return f"[{s}]{charge}" if charge else s


@functools.lru_cache(maxsize=256)
def formula(text: str) -> tuple | None:
  """(sorted (element, count) pairs, charge) of a formula; None when `text` is not one."""
  s = _plain(text)
  if s is None:
    return None
  try:
    f = _formula_class()(s)
    counts = tuple(sorted((k, v.count) for k, v in f.composition().items() if k != "e-"))
    return counts, f.charge
  except Exception:  # noqa: BLE001 - molmass raises FormulaError and others for non-formulas
    return None


def looks_chemical(ref: str) -> bool:
  """Is the reference a chemical formula (see the module docstring)?"""
  got = formula(ref)
  if got is None:
    return False
  counts, charge = got
  return bool(charge) or bool(re.search(r"[\d()\[\]·.]", _plain(ref))) or len(counts) >= 2


def warm() -> None:
  _formula_class()
