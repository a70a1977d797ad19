"""A final answer that hands the question back (its own binomial, factorial, sum, integral, limit,
log or trig operator, or its expression word for word) is not the number the problem asks for:
0 where the reference is a number; the same operators where the problem does not state them,
and every plain form of the number, are paid (`rewards.math.hands_back`)."""

import pytest

from prorl_jax.rewards import math

BINOM = "How many ways are there? Compute $\\dbinom{16}{5}$."
CASES = [
  # (problem, reference, answers that hand it back, answers that are paid)
  (
    BINOM,
    "4368",
    [
      "\\dbinom{16}{5}",
      "\\binom{16}{5}",
      "\\tbinom{16}{5}",
      "{16 \\choose 5}",
      "C(16,5)",
      "\\binom{16}{11}",
    ],
    ["4368", "4,368", "4\\,368"],
  ),
  ("How many 5-person committees can 16 people form?", "4368", [], ["4368", "\\binom{16}{5}"]),
  ("Compute 5!.", "120", ["5!", "5 !"], ["120"]),
  ("In how many orders can 5 people stand in a line?", "120", [], ["120", "5!"]),
  ("Evaluate $\\sum_{k=1}^{10} k$.", "55", ["\\sum_{k=1}^{10} k", "\\sum_{k=1}^{10}k"], ["55"]),
  ("Add the whole numbers from 1 to 10.", "55", ["\\sum_{k=1}^{10} k"], ["55"]),
  (
    "Find the area under y = x from 0 to 1.",
    "\\frac{1}{2}",
    ["\\int_0^1 x\\,dx"],
    ["\\frac12", "0.5", "1/2"],
  ),
  (
    "Find $\\lim_{x\\to 0} \\frac{\\sin x}{x}$.",
    "1",
    ["\\lim_{x\\to 0} \\frac{\\sin x}{x}"],
    ["1"],
  ),
  ("Compute $\\log_2 8$.", "3", ["\\log_2 8", "\\log_{2} 8"], ["3"]),
  ("Compute $2^{10}$.", "1024", ["2^{10}"], ["1024"]),
  ("What is two to the tenth power?", "1024", [], ["1024", "2^{10}"]),
  ("If $x = \\frac{3}{4}$, what is $x$?", "0.75", [], ["\\frac{3}{4}", "0.75"]),
  # an expression reference: the operator is the answer
  ("Simplify $\\sqrt{12}$.", "2\\sqrt{3}", [], ["2\\sqrt{3}", "\\sqrt{12}"]),
]


@pytest.mark.parametrize("problem, ref, back, paid", CASES, ids=[c[1] for c in CASES])
def test_the_question_handed_back_is_not_its_answer(problem, ref, back, paid):
  for prompt in (problem, problem + "<think>\n"):  # as asked, and under an R1-style template
    opens = "" if prompt.endswith("<think>\n") else "<think>"  # the response opens its own
    got = {
      a: math.score(f"{opens}w</think>\\boxed{{{a}}}", ref, prompt_text=prompt) for a in back + paid
    }
    assert [a for a in back if got[a].value != 0.0] == []
    assert all(
      "not the number it asks for" in got[a].reason or "unevaluated" in got[a].reason for a in back
    )
    assert [(a, got[a].reason) for a in paid if got[a].value != 1.0] == []
