"""Property tests of the generated equivalent forms (`data.equivalents`): over drawn values, on
rows in their real Hugging Face layouts (through the project's converters), every equivalent
form of the right answer earns 1.0 and every near miss 0. Hypothesis runs derandomised with
its examples saved (conftest's profile), so a regression is caught on every run."""

import fractions
import json

from hypothesis import example, given, settings
from hypothesis import strategies as st

from prorl_jax.cli import prepare
from prorl_jax.data import equivalents as eq
from prorl_jax.data.hub import load_source
from prorl_jax.rewards import math, mcq

SOURCES = prepare.SOURCES


def _row(tmp_path_factory, name, raw):
  path = tmp_path_factory.mktemp("rows") / f"{name}.jsonl"
  path.write_text(json.dumps(raw) + "\n")
  (row,), bad, _ = load_source(SOURCES[name], {name: str(path)}, {})
  assert not bad, bad
  return row


def _scores(score, row, answers, wrap):
  ref = row["reward_model"]["ground_truth"]
  prompt = "\n".join(m["content"] for m in row["prompt"])
  return {a: score(wrap.format(x=a), ref, prompt_text=prompt).value for a in answers}


def _check(score, row, right, wrong):
  for wrap in eq.WRAPPERS:
    got = _scores(score, row, right, wrap)
    assert [a for a, v in got.items() if v != 1.0] == [], (row["reward_model"], wrap)
  got = _scores(score, row, wrong, eq.WRAPPERS[0])
  assert [a for a, v in got.items() if v != 0.0] == [], row["reward_model"]


NUMBERS = st.one_of(
  st.integers(-(10**7), 10**7).map(fractions.Fraction),
  st.builds(fractions.Fraction, st.integers(-999, 999), st.integers(2, 99)).filter(
    lambda v: v.denominator > 1
  ),
)


@settings(max_examples=30, deadline=None)
@given(value=NUMBERS)
@example(value=fractions.Fraction(11, 30))
@example(value=fractions.Fraction(3600000))
@example(value=fractions.Fraction(-7, 3))
def test_every_form_of_a_number_is_paid_and_every_miss_is_not(tmp_path_factory, value):
  ref = eq.number_forms(value)[0]
  row = _row(tmp_path_factory, "deepscaler", {"problem": "Find the value.", "answer": ref})
  _check(math.score, row, eq.number_forms(value), eq.number_misses(value))


@settings(max_examples=15, deadline=None)
@given(lo=st.integers(-20, 5), width=st.integers(1, 20))
def test_every_form_of_an_interval_union_is_paid(tmp_path_factory, lo, width):
  ref, forms = eq.interval_forms(lo, lo + width)
  row = _row(tmp_path_factory, "deepscaler", {"problem": "Solve the inequality.", "answer": ref})
  _check(math.score, row, forms, eq.interval_misses(lo, lo + width))


@settings(max_examples=15, deadline=None)
@given(a=st.integers(-9, 9), b=st.sampled_from([2, 3, 5, 6, 7, 10, 13]), c=st.integers(2, 6))
def test_every_form_of_two_roots_is_paid(tmp_path_factory, a, b, c):
  ref, forms = eq.roots_forms(a, b, c)
  row = _row(tmp_path_factory, "deepscaler", {"problem": "Solve the quadratic.", "answer": ref})
  _check(math.score, row, forms, eq.roots_misses(a, b, c))


@settings(max_examples=20, deadline=None)
@given(
  value=st.builds(fractions.Fraction, st.integers(1, 5000), st.sampled_from([1, 2, 4, 5, 10])),
  unit=st.sampled_from(sorted(eq.UNITS)),
)
@example(value=fractions.Fraction(12), unit="J")
def test_every_form_of_a_quantity_is_paid(tmp_path_factory, value, unit):
  ref, forms = eq.quantity_forms(value, unit)
  raw = {"domain": "physics", "problem": "Find it.", "matched_solution": f"So \\boxed{{{ref}}}"}
  row = _row(tmp_path_factory, "scp", raw)
  wrap = ("<think>\nw\n</think>\n\nThe final answer is $\\boxed{{{x}}}$.",)
  for w in wrap + ("<think>\nw\n</think>\n\n**Answer:** {x}",):
    got = _scores(mcq.score, row, forms, w)
    assert [a for a, v in got.items() if v != 1.0] == [], (ref, w)
  got = _scores(mcq.score, row, eq.quantity_misses(value, unit), wrap[0])
  assert [a for a, v in got.items() if v != 0.0] == [], ref
