"""Our math verdicts against a grader of the field, on the same answers: the PRM800K-style
`grade_answer` of mathruler (the math reward of EasyR1 and verl's examples), over every honest
form and near miss the math tests hold (`honest_formats_test`, `answers_not_questions_test`).
Every disagreement is listed here with the reason ours is right; a new one, or one that no
longer happens, fails the test."""

import pytest

from prorl_jax.rewards import math
from tests import answers_not_questions_test as questions
from tests import honest_formats_test as honest

grader = pytest.importorskip("mathruler.grader")

DEGREES = "a degree mark is not part of the value: the question asks for the angle in degrees"
GROUPS = "a thin space or a space between digit groups separates thousands (SI style)"
INTERVAL = "an interval and the inequality that describes it are the same set"
UNION = "inequalities joined by 'or' are the union of their intervals"
MINUS = "U+2212 is the minus sign"
POWERS = "a power of ten is the number (theirs compares e-notation and powers as text)"
PM = "a ± b states both roots"
REPEATING = "a repeating decimal is the fraction it denotes"
BASE = "the parentheses around a numeral do not change its base subscript"
RATIO = "\\colon is the ratio's colon"
MILLION = "3.6 million is 3600000"
EVALUATED = (
  "the value itself, unevaluated where the problem does not state the operator (a binomial for "
  "committees, a factorial for orderings, a power for 'two to the tenth'); theirs evaluates none"
)
ROOTS = "\\frac{-1+\\sqrt{5}}{2}, \\frac{-1-\\sqrt{5}}{2}"
# (answer, reference): why ours is right; in every case here ours pays and theirs does not
KNOWN = {
  ("45°", "45"): DEGREES, ("30°", "$30^\\circ$"): DEGREES, ("70°.", "70"): DEGREES,
  ("3\\,600", "3600"): GROUPS, ("3\\ 600", "3600"): GROUPS, ("4\\,368", "4368"): GROUPS,
  ("2 < x \\le 5", "(2,5]"): INTERVAL, ("2<x\\leq 5", "(2,5]"): INTERVAL,
  ("x \\in (2, 5]", "(2,5]"): INTERVAL, ("-2 \\le x < 3", "[-2,3)"): INTERVAL,
  ("x < -1 \\text{ or } x > 3", "(-\\infty,-1)\\cup(3,\\infty)"): UNION,
  ("x<-1 \\text{ or } x>3", "(-\\infty,-1)\\cup(3,\\infty)"): UNION,
  ("x < -1 or x > 3", "(-\\infty,-1)\\cup(3,\\infty)"): UNION,
  ("x < -1 \\lor x > 3", "(-\\infty,-1)\\cup(3,\\infty)"): UNION,
  ("−7", "-7"): MINUS,
  ("10^6", "1000000"): POWERS, ("10^{6}", "1000000"): POWERS,
  ("3\\times10^{8}", "3e8"): POWERS, ("3 \\times 10^8", "3e8"): POWERS,
  ("3\\cdot 10^{8}", "3e8"): POWERS, ("3.0 \\times 10^{8}", "3e8"): POWERS,
  ("1.5\\times10^{8}", "1.5e8"): POWERS, ("1.5 \\times 10^{8}", "1.5e8"): POWERS,
  ("\\frac{-1 \\pm \\sqrt{5}}{2}", ROOTS): PM,
  ("\\frac{-1 \\pm \\sqrt5}{2}", ROOTS): PM,
  ("-\\frac{1}{2} \\pm \\frac{\\sqrt{5}}{2}", ROOTS): PM,
  ("0.\\overline{36}", "\\frac{4}{11}"): REPEATING, ("0.(36)", "\\frac{4}{11}"): REPEATING,
  ("0.\\overline{36}.", "\\frac{4}{11}"): REPEATING,
  ("0.3\\overline{6}", "\\frac{11}{30}"): REPEATING,
  ("0.3\\dot{6}", "\\frac{11}{30}"): REPEATING,
  ("(11001)_2", "11001_2"): BASE,
  ("3 \\colon 4", "3:4"): RATIO,
  ("3.6 \\text{ million}", "3600000"): MILLION, ("3.6 million", "3600000"): MILLION,
  ("\\binom{16}{5}", "4368"): EVALUATED, ("5!", "120"): EVALUATED, ("2^{10}", "1024"): EVALUATED,
}  # fmt: skip


def _cases() -> list[tuple[str, str, str, bool]]:
  """(answer, reference, problem, right?) for every math form and miss the tests hold."""
  out = []
  for _, raw, forms in honest.MATH:
    ref = raw.get("answer") or raw.get("final_answer")
    ref = ref[0] if isinstance(ref, list) else ref
    problem = raw.get("problem") or raw.get("question") or ""
    out += [(f, ref, problem, True) for f in forms]
  for raw, wrong in honest.MATH_NEAR_MISSES:
    out += [(w, raw["answer"], raw["problem"], False) for w in wrong]
  for problem, ref, back, paid in questions.CASES:
    out += [(a, ref, problem, False) for a in back] + [(a, ref, problem, True) for a in paid]
  return out


def test_every_disagreement_with_the_fields_grader_is_listed_with_its_reason():
  cases = _cases()
  assert len(cases) > 140
  found = {}
  for answer, ref, problem, right in cases:
    ours = math.score(f"<think>w</think>\\boxed{{{answer}}}", ref, prompt_text=problem).value
    assert (ours == 1.0) == right, (answer, ref)
    theirs = bool(grader.grade_answer(answer, ref.strip("$")))
    if (ours == 1.0) != theirs:
      found[(answer, ref)] = "ours pays" if ours == 1.0 else "theirs pays"
  assert sorted(set(found) - set(KNOWN)) == [], "new disagreements: give each its reason"
  assert sorted(set(KNOWN) - set(found)) == [], "listed disagreements that no longer happen"
  assert set(found.values()) == {"ours pays"}  # none of our refusals is paid by theirs
