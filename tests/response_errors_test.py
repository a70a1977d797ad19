"""A response can never make its own sample `failed`: generated text (huge and tiny exponents, NaN
and infinity spellings, deep nesting, control and non-BMP characters, long runs) fed to every
verifier with a valid reference is judged (a score, or a response error scoring 0), never marked
a verifier failure that would drop the sample."""

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from prorl_jax import rewards, sandbox
from prorl_jax.rewards import code, puzzles

PIECES = st.sampled_from(
  [
    "1e1234567890123456789",
    "1e-1234567890123456789",
    "9" * 400,
    "0." + "0" * 500 + "1",
    "NaN",
    "nan",
    "-inf",
    "Infinity",
    "1e309",
    "\\infty",
    "[" * 200,
    "{" * 200 + "}" * 200,
    "\\frac{" * 60,
    "(" * 300,
    "\x00\x07\x1b[31m",
    "\U0001d400\U0001f600\U00010000",
    "\ud7ff\ue000\ufeff\u200b",
    "A" * 3000,
    "C or A",
    "\\boxed{",
    "}",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "10^{10^{10}}",
    "9^{9^{9^{9}}}",
    "-0.0",
    "0x1p-1074",
    "1_000",
    "١٢٣",
    "Ⅻ",
    "½",
    " ",
    "\n",
  ]
)
TEXT = st.lists(st.one_of(PIECES, st.text(max_size=30)), max_size=8).map("".join)
WRAP = st.sampled_from(
  [
    "{}",
    "<think>x</think>{}",
    "<think>x</think>\\boxed{{{}}}",
    "<think>x</think>Answer: {}",
    "<think>x</think><answer>{}</answer>",
  ]
)
SETTINGS = settings(
  max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)


def _never_failed(verifier, response, reference, **meta):
  s = rewards.safe_score(verifier, response, reference, **meta)
  assert not s.failed, (response[:200], s)
  assert s.value == 0.0 or not s.response_error
  return s


@SETTINGS
@given(TEXT, WRAP)
# saved: a tower that times math-verify out (a timeout is the response's, never a failure)
@example("9^{9^{9^{9}}}", "<think>x</think>\\boxed{{{}}}")
def test_math_never_fails_on_a_response(text, wrap):
  _never_failed(rewards.route("math"), wrap.format(text), "\\frac{1}{2}")


@SETTINGS
@given(TEXT, WRAP, st.sampled_from(["C", "12 J", "2\\ \\text{s}", "\\sqrt{2gh}", "0.50", "3"]))
def test_stem_never_fails_on_a_response(text, wrap, reference):
  _never_failed(rewards.route("gpqa"), wrap.format(text), reference)


@SETTINGS
@given(TEXT, WRAP)
def test_chain_sum_never_fails_on_a_response(text, wrap):
  _never_failed(rewards.route("chain_sum"), wrap.format(text), "22")


IFEVAL_ITEMS = [
  [{"type": "no_commas"}, {"type": "lowercase"}],
  [{"type": "json_format"}, {"type": "end_with", "phrase": "Bye."}],
  [{"type": "words", "relation": "at least", "num": 10}, {"type": "language", "language": "en"}],
  [{"type": "capital_words", "relation": "at most", "num": 3}, {"type": "two_responses"}],
]


@SETTINGS
@given(TEXT, WRAP, st.sampled_from(range(len(IFEVAL_ITEMS))))
def test_ifeval_never_fails_on_a_response(text, wrap, item):
  _never_failed(rewards.route("ifeval"), wrap.format(text), None, instructions=IFEVAL_ITEMS[item])


RG = {
  task: {k: v for k, v in puzzles.make_items(task, seed=3, size=1)[0]["extra_info"].items()}
  for task in ("number_sorting", "countdown", "basic_arithmetic", "letter_counting", "maze")
}


@SETTINGS
@given(TEXT, st.sampled_from(sorted(RG)))
def test_reasoning_gym_never_fails_on_a_response(text, task):
  meta = {k: v for k, v in RG[task].items() if k != "entry"}
  _never_failed(
    rewards.route("reasoning_gym"), f"<think>x</think><answer>{text}</answer>", None, **meta
  )


@SETTINGS
@given(TEXT, st.sampled_from(["3\n", "0.5\n", "1 2 3\n", "-7\n", "1e5\n"]))
def test_code_output_comparison_never_raises(text, want):
  run = sandbox.RunResult(text, "", 0)
  passed, _ = code._judge({}, run, want)
  assert passed in (True, False)
  fn = {"fn_name": "f"}
  passed, _ = code._judge(fn, sandbox.RunResult(sandbox.RESULT_MARK + text, "", 0), [1, 2.5])
  assert passed in (True, False)


@pytest.mark.parametrize(
  "stdout", ["1e1234567890123456789", "1E-9999999999999999999", "nan", "-Infinity", "9" * 5000]
)
def test_a_huge_exponent_in_program_output_is_wrong_not_a_failure(stdout):
  spec = json.dumps({"inputs": [""], "outputs": ["3"]})
  assert code.same_stdout(stdout, "3") is False
  assert code.same_stdout(stdout, "3.5") is False
  s = rewards.safe_score(lambda r, ref, **_: code.score(r, ref, **_), "no code", spec)
  assert not s.failed
