"""Final answers found in free solution text (SCP-116K's `matched_solution`), by documented
rules; `prepare` records which rule found each row's reference."""

from __future__ import annotations

import re

from prorl_jax.rewards.common import last_boxed
from prorl_jax.rewards.quantity import value_side

_ANSWER_IS = re.compile(
  r"(?:the\s+(?:final\s+)?answer\s+is|final\s+answer\s*[:=]|answer\s*:)\s*(.+?)\s*(?:\.\s*$|$)",
  re.I | re.M,
)
_FINAL_EQUALS = re.compile(r"=\s*([^=]{1,60}?)\s*\.?\s*$")
SHORT_LINE = 40  # characters of a last line that is taken as the answer
_LEAD = re.compile(
  r"^(?:so|thus|therefore|hence|finally|it is|this is|we get|which is|giving)\b[,:]?\s*", re.I
)


_DISPLAY = re.compile(r"\\[\[\]()]|\$\$?")


def _clean_answer(text: str) -> str:
  """The value an answer states: display-math delimiters (`\\[`, `\\]`, `$`) dropped, and of
  `v = 14 m/s` or `x \\approx 3.2` the side after the last `=` or `\\approx`."""
  text = _DISPLAY.sub(" ", text).strip().rstrip(".,;").strip()
  return value_side(text).strip().rstrip(".,;").strip()


_ALIGN = re.compile(r"\\(?:begin|end)\{(?:aligned|align\*?|split|gathered|equation\*?)\}|&")
_DISPLAYS = ((r"\]", r"\["), ("$$", "$$"))


def _last_display_joined(solution: str) -> str:
  """The solution with a display equation it ends in (`\\[ ... \\]`, `$$ ... $$`, over one
  line or several, aligned or not) brought onto one last line: its last row, which states the
  result (`v = \\frac{d}{t} = 3.2 \\text{ m/s}`)."""
  text = solution.rstrip().rstrip(".,;").rstrip()
  for close, open_ in _DISPLAYS:
    if text.endswith(close):
      i = text.rfind(open_, 0, len(text) - len(close))
      if i < 0:
        return solution
      body = _ALIGN.sub("", text[i + len(open_) : len(text) - len(close)])
      rows = [r.strip() for r in re.split(r"\\\\|\n", body) if r.strip()]
      return text[:i] + "\n" + (rows[-1] if rows else "")
  return solution


def scp_answer(solution: str) -> tuple[str, str] | None:
  """(answer, method) from SCP-116K's free solution text, by the first rule that applies:
  `boxed` (the last \\boxed{}), `answer_is` ("the answer is X", "Final answer: X"),
  `final_equals` (the last line, or the last row of a display equation the solution ends in,
  ends in "= value"), `final_line` (a last line of at most
  SHORT_LINE characters and three words, with a digit or a formula in it; "so", "thus", "it is"
  and the like before it set aside); None when no rule applies."""
  boxed = last_boxed(solution)
  if boxed and boxed.strip():
    return _clean_answer(boxed), "boxed"
  found = [_clean_answer(m) for m in _ANSWER_IS.findall(solution)]
  if found and found[-1] and len(found[-1]) <= 120:
    return found[-1], "answer_is"
  lines = [ln.strip() for ln in _last_display_joined(solution).splitlines() if ln.strip()]
  if not lines:
    return None
  last = _LEAD.sub("", lines[-1].strip("$ ").rstrip("."))
  m = _FINAL_EQUALS.search(last)
  if m and _clean_answer(m.group(1)):
    return _clean_answer(m.group(1)), "final_equals"
  value = _clean_answer(last)
  if len(last) <= SHORT_LINE and len(value.split()) <= 3 and re.search(r"[\d\\=^]", value):
    return value, "final_line"
  return None
