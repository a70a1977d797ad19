r"""STEM: multiple choice, and short answers (physical quantities, expressions, words).

The answer is read (after `</think>`, with Markdown emphasis removed: `**Answer: C**`) from, in
order: the last `\boxed{...}`, `<answer>...</answer>`, the last "answer is X" / "Answer: X" /
"correct option is X" line. LaTeX wrappers around it (`\text{C}`, `\textbf{(C)}`, `\mathrm`) are
read past.

A reference that is one letter A-J is a multiple-choice key. The answer chooses the letter it
starts with (`C`, `(C)`, `C)`, `C.`, `C: text`, `option C`); what follows a `)`, `.` or `:`
after the letter is the choice's own text and is never read as another choice (`C) 60 J`,
`C) A ball`). Any other choice named beside it (`C or A`, `C, A`, `C/A`, `A B C D`,
`C (or B)`, `(C) A, B`: nothing but letters after it) chooses nothing.

Any other reference is a short answer. When both it and the answer are one number with an
optional unit (`quantity.parse`), they compare as quantities: converted to the reference's unit,
within 1% of the reference (0 only equals 0). Otherwise both are normalised (case, spaces, `$`,
a trailing period, `\text{}`) and must be equal, or, as math, equal by math-verify (an expression
such as `\sqrt{2gh}` or `\frac{mv^2}{2}`). An empty answer earns nothing.
"""

from __future__ import annotations

import fractions
import re

from prorl_jax.rewards import chemistry, quantity, typeset
from prorl_jax.rewards import math as math_verifier
from prorl_jax.rewards.common import Score, answer_tag, blank, last_boxed, read, without_think_tag

_EMPHASIS = re.compile(r"\*\*|__|(?<![\w*])\*(?=[^\s*])|(?<=[^\s*\\])\*(?![\w*])")
_ANSWER_IS = re.compile(
  r"\b(?:answer|option|choice)\b[^\S\n]*(?:is\b[^\S\n]*:?|:|=|\|)"
  r"(?:[^\S\n]*\n){0,2}[^\S\n]*"  # the answer may stand on the next line ("is:\n(A)")
  r"(?:(?:option|choice)\b[^\S\n]*)?"
  r"([^\n]+?)[^\S\n]*(?:\.(?=\s|$)|$)",
  re.I | re.M,
)
# a last line that is a choice's label and nothing else: `(A)`, `A.`, `**A**`; or the label and
# the choice's own text (`**(C) 9.0 J**`, `C) 9.0 J`)
_LABEL_LINE = re.compile(r"[\s*_>#]*\(?([A-Ja-j])\)?[.:]?[\s*_]*")
_LABELLED_LINE = re.compile(r"[\s*_>#]*(?:\(([A-J])\)|([A-J])\))[^\S\n]+[^\n]*\S[^\n]*")
_WRAPPER = re.compile(
  r"\\(?:text|textbf|textit|mathrm|mathbf|mathit|textrm|mbox|boxed|fbox)\s*\{([^{}]*)\}"
)
_LETTER = re.compile(r"(?:(?i:option|choice)\s+)?\(?([A-Ja-j])(\))?(?=$|[\s.:)\],;/&|-])")
_L = r"\(?(?:(?:option|choice)\s+)?[A-Ja-j]\b\)?"
# after the chosen letter (and after its `)`, `.` or `:`): another choice joined to it
_JOINED = re.compile(
  rf"^\s*(?:[,/&;|]\s*(?:(?:or|and)\s+)?{_L}|(?:[,/&;|]\s*)?\b(?:or|and)\s+{_L}"
  rf"|\(\s*(?:(?:or|and)\s+)?[A-Ja-j]\s*\))",
  re.I,
)
# after a bare letter: another letter standing alone ("C A", "A B C D")
_BESIDE = re.compile(r"^\s+\(?[A-Ja-j]\)?(?=$|[\s.,;)])")
# nothing but more choice letters ("(C) A, B"): a list of choices, not a choice's own text
# (letters and separators are disjoint classes: one way to match, linear time)
_CONJUNCTION = re.compile(r"\b(?:or|and)\b", re.I)
_LETTERS_ONLY = re.compile(r"[\s,/&;|()]*(?:[A-Ja-j]\b[\s,/&;|()]*)+")


def _unwrap(s: str) -> str:
  """The text as typeset (`typeset.answer`: fonts, boxes and spacing gone), then any wrapper
  left."""
  s = typeset.answer(s)
  for _ in range(4):
    t = _WRAPPER.sub(r"\1", s)
    if t == s:
      break
    s = t
  return s


def extract(text: str) -> str | None:
  """The final answer's text: last boxed, answer tag, the last "answer is" line (the answer on
  it or on the line after it), or a last line that is a choice's label alone (`(A)`)."""
  for got in (last_boxed(text), answer_tag(text)):
    if got:
      return got
  found = _ANSWER_IS.findall(_EMPHASIS.sub("", text))
  if found and (last := found[-1].strip().strip("|").strip()):
    return last
  lines = [ln for ln in text.strip().splitlines() if ln.strip()]
  for pattern in (_LABEL_LINE, _LABELLED_LINE):
    labels = [_label(m) for ln in lines if (m := pattern.fullmatch(ln))]
    last = pattern.fullmatch(lines[-1]) if lines else None
    # one label stands alone however often; several different ones are a list, not a choice
    if last:
      return _label(last) if len(set(labels)) == 1 else None
  return None


def _label(m: re.Match) -> str:
  return next(g for g in m.groups() if g).upper()


def chosen_letter(answer: str) -> str | None:
  """The one choice letter an answer names (upper case), or None (none, or several)."""
  s = _EMPHASIS.sub("", _unwrap(answer)).strip().strip("$").strip()
  m = _LETTER.match(s)
  if not m:
    return None
  rest = s[m.end() :]
  bare = not m.group(2) and rest[:1] not in ".:"
  letters_only = _LETTERS_ONLY.fullmatch(_CONJUNCTION.sub(" ", rest))
  if _JOINED.match(rest) or letters_only or (bare and _BESIDE.match(rest)):
    return None
  return m.group(1).upper()


def _norm(s: str) -> str:
  s = _unwrap(s).strip().strip("$").strip().rstrip(".").strip()
  return re.sub(r"\s+", " ", s).lower()


def score(response: str, reference, *, prompt_text: str | None = None, **_) -> Score:
  """1 when the answer the response gives after its think block is the reference's choice (or
  its short answer), else 0."""
  said = read(response, prompt_text)
  final = said.answer
  if final is None:
    return Score(0.0, said.why)
  got = extract(final)
  if blank(got):
    return Score(0.0, "no answer found")
  ref = str(reference).strip()
  if is_key(ref, prompt_text):
    ok = chosen_letter(got) == ref.strip("()").upper()
  else:
    ok = short_answer_matches(got, ref, without_think_tag(prompt_text))
  return Score(1.0 if ok else 0.0, "correct" if ok else f"wrong: {got[:50]!r}")


_CHOICES = re.compile(r"^\s*[(\[]?[A-Ja-j][).:\]]", re.M)


def is_key(ref: str, prompt_text: str | None = None) -> bool:
  """Is the reference a multiple-choice key? A letter A-J (`C`, `(C)`); a lower-case one only
  where the question lists choices (or is not known): `g` alone is the symbol g of a physics
  answer."""
  if not re.fullmatch(r"\(?[A-Ja-j]\)?", ref):
    return False
  return ref.strip("()").isupper() or not prompt_text or _CHOICES.search(prompt_text) is not None


_SYMBOL = re.compile(r"[+-]?(?:\d+(?:\.\d+)?)?[A-Za-z]")
_TERM = re.compile(r"([+-]?)\s*(\d+(?:\.\d+)?)?\s*(?:\\cdot|\\times|\*|\\,|\\ |\\!)?\s*([A-Za-z])")


def _term(text: str) -> tuple | None:
  """A number times one letter (`2g`, `2 \\cdot g`, `-g`), as (coefficient, letter); else None.
  math-verify reads `2g` as 2 grams and folds `G` into `g`, so these are compared here."""
  m = _TERM.fullmatch(_unwrap(text).strip().strip("$").strip().rstrip(".").strip())
  if not m:
    return None
  coefficient = fractions.Fraction(m.group(2) or 1) * (-1 if m.group(1) == "-" else 1)
  return coefficient, m.group(3)


_WORD = re.compile(r"(?<!\\)\b[A-Za-z]{2,}")


def symbolic(ref: str) -> bool:
  """A reference that is a symbol of the solution, alone or times a number written against it
  (`g`, `2g`, `0.5m`): read as algebra, case and all, never as a unit (`2g` is not 2 grams)."""
  return _SYMBOL.fullmatch(_unwrap(ref).strip().strip("$").strip()) is not None


_CHEMICAL = re.compile(r"\b(?:element|symbol|formula|compound|atomic|molecul\w*|chemical)\b", re.I)


def _other_substance(got: str, ref: str, prompt_text: str | None) -> bool:
  """In a question about chemistry, two spellings that differ only in case and read as different
  formulas (`CO`, carbon monoxide, for `Co`, cobalt) are different answers."""
  if not prompt_text or not _CHEMICAL.search(prompt_text):
    return False
  a, b = chemistry.formula(got), chemistry.formula(ref)
  return a is not None and b is not None and a != b


_PRODUCT = re.compile(
  r"([+-]?)\s*(\d+(?:\.\d+)?)?\s*(?:\\cdot|\\times|\*)?\s*((?:[A-Za-z]\s*(?:\\cdot|\\times|\*)?\s*){2,4})"
)


def symbol_product(text: str, prompt_text: str | None) -> tuple | None:
  """A number times two to four letters (`2mg`, `mgh`, `2 m g`) where the question names each
  letter as a symbol of its own (`mass m`, `$g$`): (coefficient, sorted letters); else None.
  Read as a unit (`2mg` as 2 milligrams) it would pay `0.002 g`."""
  m = _PRODUCT.fullmatch(_unwrap(text).strip().strip("$").strip().rstrip(".").strip())
  if not m or not prompt_text:
    return None
  letters = re.findall(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", m.group(3)))
  if not all(re.search(rf"(?<![A-Za-z\\]){c}(?![A-Za-z])", prompt_text) for c in set(letters)):
    return None
  coefficient = fractions.Fraction(m.group(2) or 1) * (-1 if m.group(1) == "-" else 1)
  return coefficient, tuple(sorted(letters))


def short_answer_matches(got: str, ref: str, prompt_text: str | None = None) -> bool:
  """A short (non-letter) answer against its reference: quantities (a bare number read in the
  unit the question asks for, `quantity.implied_unit`), strings, then math."""
  g, r = quantity.value_side(got), quantity.value_side(ref)
  if chemistry.looks_chemical(r):  # element counts and charge, not algebra
    return chemistry.formula(g) == chemistry.formula(r)
  if symbolic(r):  # `2g` is twice g, not 2 grams; `G` is not `g`
    return (term := _term(g)) is not None and term == _term(r)
  if (product := symbol_product(r, prompt_text)) is not None:  # `2mg` is 2·m·g here
    return symbol_product(g, prompt_text) == product
  qg, qr = quantity.parse(g), quantity.parse(r)
  if qr is not None:
    implied = quantity.implied_unit(prompt_text, qr) if qg is not None else None
    return qg is not None and quantity.same_quantity(qg, qr, implied)
  if len(_norm(g)) > max(4 * len(_norm(r)), 64):  # a list of candidates, not an answer
    return False
  if _norm(g) == _norm(r) and (_WORD.search(r) or g.strip() == r.strip()):
    # case aside only for words: as a symbol, `G` is not `g`; a formula is not its element
    return g.strip() == r.strip() or not _other_substance(g, r, prompt_text)
  return math_verifier.equivalent(g, r)


def reference_problem(reference) -> str | None:
  """Why a short-answer reference cannot be judged (None when it can): it must be a letter, a
  quantity, a chemical formula, a symbol, or text math-verify reads (checked at prepare)."""
  ref = str(reference).strip()
  if re.fullmatch(r"\(?[A-Ja-j]\)?", ref) or quantity.parse(quantity.value_side(ref)) is not None:
    return None
  if chemistry.looks_chemical(quantity.value_side(ref)) or symbolic(quantity.value_side(ref)):
    return None
  if not re.search(r"[\w\d]", ref) or math_verifier.parsed(quantity.value_side(ref)) is None:
    return f"reference {ref[:40]!r} is neither a quantity nor an expression"
  return None


def warm(reference=None, **_):
  """Loads pint and molmass (and math-verify for expressions) in the pool process, before the
  fork."""
  quantity.registry()
  chemistry.warm()
  typeset.warm()
  ref = str(reference or "").strip()
  if not re.fullmatch(r"\(?[A-Ja-j]\)?", ref) and quantity.parse(quantity.value_side(ref)) is None:
    math_verifier.warm()
