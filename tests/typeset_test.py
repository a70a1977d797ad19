"""An answer is read as typeset (`rewards.typeset`): two answers that print the same are the same
answer, and the value comparison runs on that reading. The forms below are honest answers in the
real layouts (rows through the project's converters, responses through the rollout worker's
scoring path, `VerifierPool.score_many`) that a reader takes for the reference; each has a near
miss in the same spelling that must earn nothing. The generated spellings (`data.equivalents`)
run the same way over drawn values, derandomised with saved examples."""

import fractions
import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from prorl_jax.cli import prepare
from prorl_jax.data import equivalents as eq
from prorl_jax.data import suite
from prorl_jax.data.hub import load_source
from prorl_jax.rewards import typeset
from prorl_jax.rewards.pool import VerifierPool

THINK = "<think>\nLet me work it out and check it twice.\n</think>\n\n"
BOXED = THINK + "The final answer is $\\boxed{{{x}}}$."
LINE = THINK + "**Answer:** {x}"

# (question, reference, honest forms, near misses): math rows (deepscaler's layout)
MATH = [
  (
    "Angle in degrees?",
    "60^\\circ",
    ["\\frac{\\pi}{3}\\ \\text{rad}", "\\ang{60}"],
    ["\\frac{\\pi}{4}\\ \\text{rad}"],
  ),
  ("Angle?", "70", ["70\\,^{\\circ}", "70^{\\circ}"], ["71\\,^{\\circ}"]),
  (
    "Vector AB?",
    "(5,-2,2)",
    ["\\langle 5, -2, 2 \\rangle", "5\\mathbf{i} - 2\\mathbf{j} + 2\\mathbf{k}"],
    ["\\langle 5, -2, 3 \\rangle", "5\\mathbf{i} + 2\\mathbf{j} + 2\\mathbf{k}"],
  ),
  (
    "Solve.",
    "(2,5]",
    ["\\{x \\mid 2 < x \\le 5\\}", "\\{x \\in \\mathbb{R} : 2 < x \\leq 5\\}"],
    ["\\{x \\mid 2 \\le x \\le 5\\}"],
  ),
  (
    "Solve the system.",
    "(2,3)",
    ["\\begin{cases} x = 2 \\\\ y = 3 \\end{cases}"],
    ["\\begin{cases} x = 3 \\\\ y = 2 \\end{cases}"],
  ),
  (
    "Sum of the first ten positive integers?",
    "55",
    ["\\sum_{k=1}^{10} k = 55"],
    ["\\sum_{k=1}^{10} k = 56"],
  ),
  ("Which is it? (A) 2 (B) 2.5 (C) 3", "2.5", ["\\textbf{(B)}\\ 2.5"], ["\\textbf{(C)}\\ 3"]),
  (
    "Write 5/11 as a decimal.",
    "\\frac{5}{11}",
    ["0.4545\\ldots", "0.\\overline{45}"],
    ["0.4546\\ldots"],
  ),
  ("Compute z.", "4-3i", ["4 - 3\\mathrm{i}"], ["4 + 3\\mathrm{i}"]),
  (
    "Solve the inequality.",
    "(-\\infty,-1]\\cup[2,\\infty)",
    ["x \\leq -1 \\ \\text{or} \\ x \\geq 2"],
    ["x < -1 \\ \\text{or} \\ x \\geq 2"],
  ),
  ("Ratio?", "1.5", ["\\frac{3}{2}", "\\dfrac{3}{2}"], ["\\frac{2}{3}"]),
  ("Write 25 in base 2.", "11001_2", ["11001", "(11001)_2"], ["11011"]),
  (
    "Energy of the photon in J?",
    "3.96\\times10^{-19}",
    ["\\approx 3.96 \\times 10^{-19}"],
    ["\\approx 3.69 \\times 10^{-19}"],
  ),
  (
    "Find the remainder of 3^100 divided by 7.",
    "4",
    ["3^{100} \\equiv 4 \\pmod{7}", "4 \\pmod 7"],
    ["3^{100} \\equiv 5 \\pmod{7}"],
  ),
  ("Power in watts?", "300", ["\\SI{300}{\\watt}", "\\qty{300}{W}"], ["\\SI{310}{\\watt}"]),
  ("Distance in m?", "3430", ["3\\,430\\ \\text{m}", "3\\;430"], ["3\\,340\\ \\text{m}"]),
  (
    "Temperature in Celsius?",
    "5",
    ["5 ℃", "5\\,^{\\circ}\\mathrm{C}", "\\SI{5}{\\celsius}"],
    ["6 ℃"],
  ),
  (
    "Angle in radians?",
    "\\frac{\\pi}{3}",
    ["60^\\circ", "\\frac{\\pi}{3}\\ \\text{rad}"],
    ["45^\\circ"],
  ),
]
# (the solution's last line, honest forms, near misses): STEM short answers (SCP's layout)
SCP = [
  (
    "v = \\boxed{16.7 \\text{ m/s}}",
    ["16.7\\ \\text{m/s}", "\\SI{16.7}{\\meter\\per\\second}"],
    ["17.7\\ \\text{m/s}"],
  ),
  (
    "E = \\boxed{1.6 \\times 10^{-17} J}",
    ["1.60\\times10^{-17}\\,\\mathrm{J}", "\\SI{1.60e-17}{\\joule}"],
    ["1.60\\times10^{-18}\\,\\mathrm{J}"],
  ),
  (
    "d = \\boxed{3430 m}",
    ["3\\,430\\ \\text{m}", "\\qty{3.43}{\\kilo\\meter}"],
    ["3\\,430\\ \\text{s}"],
  ),
  ("T = \\boxed{5 °C}", ["5 ℃", "\\SI{5}{\\degreeCelsius}"], ["15 ℃"]),
  (
    "x = \\boxed{1.5 m}",
    ["\\frac{3}{2}\\ \\text{m}", "\\tfrac32\\,\\mathrm{m}"],
    ["\\frac{3}{2}\\ \\text{s}"],
  ),
  (
    "P = \\boxed{300 W}",
    ["\\SI{300}{\\watt}", "\\qty{300}{W}", "\\qty{0.3}{\\kilo\\watt}"],
    ["\\SI{300}{\\joule}"],
  ),
]
GPQA_ROW = {
  "Question": "How much work is done lifting a 0.9 kg mass by 1 m (g = 10 m/s^2)?",
  "Correct Answer": "9.0 J",
  "Incorrect Answer 1": "0.9 J",
  "Incorrect Answer 2": "90 J",
  "Incorrect Answer 3": "1.0 J",
}


def _convert(tmp_path, name, raw):
  path = tmp_path / f"{name}-{abs(hash(json.dumps(raw, sort_keys=True)))}.jsonl"
  path.write_text(json.dumps(raw) + "\n")
  sources = {**prepare.SOURCES, **suite.SOURCES}
  (row,), bad, _ = load_source(sources[name], {name: str(path)}, {})
  assert not bad, bad
  return row


def _job(row, response):
  text = "\n".join(m["content"] for m in row["prompt"])
  extra = dict(row["extra_info"], prompt_text=text)
  return (row["data_source"], response, row["reward_model"]["ground_truth"], extra)


@pytest.fixture(scope="module")
def pool():
  p = VerifierPool(processes=2, timeout_s=30.0)
  yield p
  p.close()


def _verdicts(pool, jobs):
  return [s.value for s in pool.score_many(jobs)]


def _math_jobs(tmp_path, question, ref, answers, wraps=(BOXED,)):
  row = _convert(tmp_path, "deepscaler", {"problem": question, "answer": ref})
  return [_job(row, w.format(x=a)) for a in answers for w in wraps]


def test_two_answers_that_typeset_alike_are_one_answer():
  pairs = [
    ("70\\,^{\\circ}", "70°"),
    ("\\dfrac{1}{2}", "\\frac12"),
    ("\\left( 1, 2 \\right)", "(1, 2)"),
    ("\\mathrm{4} - 3\\,\\mathrm{i}", "4 - 3i"),
    ("3\\,430", "3430"),
    ("\\SI{3e8}{\\meter\\per\\second}", "3\\times10^{8} m/s"),
    ("\\qty{300}{W}", "300\\ \\text{W}"),
    ("0.45\\dots", "0.45\\ldots"),
    ("\\textbf{(B)}", "(B)"),
    ("x \\leqslant 2", "x \\le 2"),
    ("5 ℃", "5^\\circ\\mathrm{C}"),
    ("\\displaystyle\\tfrac{3}{4}", "\\frac{3}{4}"),
    ("3 \\pmod{7}", "3 (mod 7)"),
    ("\\text{dyn}\\text{asty}", "dynasty"),
    ("\\ang{45}", "45\\degree"),
  ]
  for a, b in pairs:
    assert typeset.same(a, b), (a, b, typeset.answer(a), typeset.answer(b))
  apart = [
    ("70^\\circ", "71^\\circ"),
    ("\\frac{1}{2}", "\\frac{2}{1}"),
    ("3\\,430", "3\\,43"),
    ("4-3i", "4+3i"),
  ]
  for a, b in apart:
    assert not typeset.same(a, b), (a, b)


def test_a_modulus_is_not_plus_minus():
  assert typeset.answer("3^{100} \\equiv 4 \\pmod{7}") == "3^{100} \\equiv 4 (mod 7)"
  assert "\\pm" not in typeset.answer("a \\bmod b") and typeset.answer("a \\bmod b") == "a mod b"


def test_every_named_math_form_is_paid_and_its_near_miss_is_not(pool, tmp_path):
  right, wrong = [], []
  for question, ref, good, bad in MATH:
    right += _math_jobs(tmp_path, question, ref, good, (BOXED, THINK + "So \\(\\boxed{{{x}}}\\)."))
    wrong += _math_jobs(tmp_path, question, ref, bad)
  got = _verdicts(pool, right + wrong)
  refused = [j[1][len(THINK) :] for j, v in zip(right, got) if v != 1.0]
  paid = [j[1][len(THINK) :] for j, v in zip(wrong, got[len(right) :]) if v != 0.0]
  assert (refused, paid) == ([], [])


def test_every_named_stem_form_is_paid_and_its_near_miss_is_not(pool, tmp_path):
  right, wrong = [], []
  for last, good, bad in SCP:
    raw = {"domain": "physics", "problem": "Find it.", "matched_solution": f"Work.\n{last}"}
    row = _convert(tmp_path, "scp", raw)
    right += [_job(row, w.format(x=a)) for a in good for w in (BOXED, LINE)]
    wrong += [_job(row, BOXED.format(x=a)) for a in bad]
  got = _verdicts(pool, right + wrong)
  refused = [j[1][len(THINK) :] for j, v in zip(right, got) if v != 1.0]
  paid = [j[1][len(THINK) :] for j, v in zip(wrong, got[len(right) :]) if v != 0.0]
  assert (refused, paid) == ([], [])


def test_a_choice_is_read_in_a_box_a_table_bold_or_alone_on_the_last_line(pool, tmp_path):
  row = _convert(tmp_path, "gpqa_diamond", GPQA_ROW)
  key = row["reward_model"]["ground_truth"]
  other = "A" if key != "A" else "B"
  right = [_job(row, THINK + f) for f in eq.choice_forms(key, "9.0 J")]
  wrong = [_job(row, THINK + f) for f in eq.choice_misses(key, "9.0 J", other)]
  got = _verdicts(pool, right + wrong)
  refused = [j[1][len(THINK) :] for j, v in zip(right, got) if v != 1.0]
  paid = [j[1][len(THINK) :] for j, v in zip(wrong, got[len(right) :]) if v != 0.0]
  assert (refused, paid) == ([], [])


def _generated(pool, tmp_path, question, ref, forms, misses):
  """Every form in every wrapper, and every form's typeset-alike spellings in one wrapper."""
  alike = [t for f in forms for t in eq.typeset_alike(f)]
  right = _math_jobs(tmp_path, question, ref, forms, eq.WRAPPERS)
  right += _math_jobs(tmp_path, question, ref, alike, eq.WRAPPERS[:1])
  wrong = _math_jobs(tmp_path, question, ref, misses)
  got = _verdicts(pool, right + wrong)
  refused = [j[1].split("</think>")[1] for j, v in zip(right, got) if v != 1.0]
  paid = [j[1].split("</think>")[1] for j, v in zip(wrong, got[len(right) :]) if v != 0.0]
  assert (refused, paid) == ([], []), ref


NONZERO = st.integers(-9, 9).filter(bool)


@settings(max_examples=2, deadline=None)
@given(degrees=st.sampled_from([15, 30, 36, 45, 60, 72, 90, 108, 120, 135, 150, 210, 270]))
@example(degrees=60)
def test_generated_angles(pool, tmp_path_factory, degrees):
  ref, forms = eq.angle_forms(degrees)
  _generated(
    pool,
    tmp_path_factory.mktemp("a"),
    "Find the angle in degrees.",
    ref,
    forms,
    eq.angle_misses(degrees),
  )


@settings(max_examples=5, deadline=None)
@given(a=NONZERO, b=NONZERO, c=NONZERO)
@example(a=5, b=-2, c=2)
def test_generated_vectors(pool, tmp_path_factory, a, b, c):
  ref, forms = eq.vector_forms(a, b, c)
  _generated(
    pool, tmp_path_factory.mktemp("v"), "Find the vector.", ref, forms, eq.vector_misses(a, b, c)
  )


@settings(max_examples=5, deadline=None)
@given(x=st.integers(-20, 20), y=st.integers(-20, 20))
@example(x=2, y=3)
def test_generated_systems(pool, tmp_path_factory, x, y):
  ref, forms = eq.system_forms(x, y)
  _generated(
    pool, tmp_path_factory.mktemp("s"), "Solve the system.", ref, forms, eq.system_misses(x, y)
  )


@settings(max_examples=2, deadline=None)
@given(lo=st.integers(-20, 10), width=st.integers(1, 20))
@example(lo=2, width=3)
def test_generated_set_builder_intervals(pool, tmp_path_factory, lo, width):
  ref, forms = eq.set_forms(lo, lo + width)
  misses = eq.set_misses(lo, lo + width)
  _generated(pool, tmp_path_factory.mktemp("i"), "Solve the inequality.", ref, forms, misses)


@settings(max_examples=5, deadline=None)
@given(v=st.integers(1, 5000))
@example(v=55)
def test_generated_stated_values(pool, tmp_path_factory, v):
  forms = eq.statement_forms(v)
  misses = [
    f.replace(f"= {v}", f"= {v + 1}").replace(f"{{{v}}}", f"{{{v + 1}}}") for f in forms[:1]
  ]
  misses += [f"\\approx {v + 1}"]
  _generated(pool, tmp_path_factory.mktemp("n"), "Compute the total.", str(v), forms, misses)


@settings(max_examples=5, deadline=None)
@given(value=st.builds(fractions.Fraction, st.integers(-999, 999), st.integers(2, 40)))
@example(value=fractions.Fraction(5, 11))
def test_generated_numbers_in_typeset_alike_spellings(pool, tmp_path_factory, value):
  forms = eq.number_forms(value)[:4]
  _generated(
    pool, tmp_path_factory.mktemp("f"), "Find the value.", forms[0], forms, eq.number_misses(value)
  )
