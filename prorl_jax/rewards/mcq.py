"""STEM multiple choice and short exact answers.

The answer is taken (after `</think>`) from, in order: `\\boxed{...}`, `<answer>...</answer>`,
"Answer: X" / "answer is X". A reference that is one letter A-J is a multiple-choice key and
matches the chosen letter, when it is the only choice letter given ("C or A", "A B C D" choose
nothing); otherwise normalised strings (case, spaces, $, trailing period)
must be equal, or equal as numbers the way the reference says (an integer reference needs that
integer; only a decimal reference allows 1e-6). An empty answer earns nothing.
"""

from __future__ import annotations

import re

from prorl_jax.rewards.common import Score, after_think, answer_tag, blank, last_boxed, same_token

# The answer runs to the end of its line or to a full stop (a period before a space or the end;
# a decimal point is not one: "Answer: 3.5" is 3.5).
_ANSWER_IS = re.compile(r"answer\s*(?:is|:)\s*\(?([^\n]+?)\)?\s*(?:\.(?=\s|$)|$)", re.I | re.M)


def _norm(s: str) -> str:
  s = s.strip().strip("$").strip().rstrip(".").strip()
  s = re.sub(r"\\text\{(.*?)\}", r"\1", s)
  return re.sub(r"\s+", " ", s).lower()


def extract(text: str) -> str | None:
  for got in (last_boxed(text), answer_tag(text)):
    if got:
      return got
  found = _ANSWER_IS.findall(text)
  return found[-1] if found else None


def score(response: str, reference, **_) -> Score:
  """1 when the answer the response gives after its think block (last boxed, answer tag, or "the
  answer is ...") is the reference's choice, else 0."""
  final = after_think(response)
  if final is None:
    return Score(0.0, "unfinished <think> block")
  got = extract(final)
  if blank(got):
    return Score(0.0, "no answer found")
  ref = _norm(str(reference))
  ans = _norm(got)
  if re.fullmatch(r"[a-j]", ref):
    m = re.match(r"\(?([a-j])\)?(?:[\s.:)]|$)", ans)
    # one choice: no other choice letter standing alone after it ("C or A", "A B C D")
    rest = got.strip()[m.end() :] if m else ""
    ok = bool(m) and m.group(1) == ref and not re.search(r"\b[A-J]\b", rest)
  else:
    long = len(ans) > max(4 * len(ref), 64)  # a list of candidates, not an answer
    ok = not long and (ans == ref or same_token(ans.replace(",", ""), ref.replace(",", "")))
  return Score(1.0 if ok else 0.0, "correct" if ok else f"wrong: {got[:50]!r}")
