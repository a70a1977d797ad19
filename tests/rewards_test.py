"""Verifiers: math, code (with a hostile corpus), puzzles, IFEval, MCQ, and the process pool."""

import json
import os
import socket
import time

import pytest

from prorl_jax import rewards
from prorl_jax.rewards import code, ifeval, math, mcq, puzzles
from prorl_jax.rewards.pool import VerifierPool
from tests import socket_helpers


# ---------------------------------------------------------------------------------------- math
@pytest.mark.parametrize(
  "response,ref,want",
  [
    ("<think>so 1/2</think> The answer is \\boxed{\\frac{1}{2}}", "0.5", 1.0),
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("<think>x</think>\\boxed{x=3}", "3", 1.0),
    ("<think>hmm</think>\\boxed{4}", "3", 0.0),
    ("<think>hmm</think>the answer is 3", "3", 0.0),  # no box
    ("<think>\\boxed{3}</think> so \\boxed{5}", "3", 0.0),  # the box inside think is ignored
    ("<think>\\boxed{3} still thinking", "3", 0.0),  # unfinished think block
  ],
)
def test_math(response, ref, want):
  assert math.score(response, ref).value == want


def test_math_huge_correct_answer_and_timeouts_are_marked():
  big = math.score("<think>x</think>\\boxed{10^{10000000}}", "10^{10000000}", timeout_s=2)
  assert big.value == 1.0 and not big.failed
  # math-verify's own timeout (a SIGALRM) or, if that one is lost, the pool's hard kill: either
  # way a marked failure, never an unmarked 0
  pool = VerifierPool(processes=1, timeout_s=8.0)
  try:
    t0 = time.time()
    slow, deep = pool.score_many(
      [
        ("math", "<think>x</think>\\boxed{9^{9^{9^9}}}", "3", {"timeout_s": 1}),
        ("math", "\\boxed{" + "{" * 400 + "1" + "}" * 400 + "}", "2", {"timeout_s": 1}),
      ]
    )
    # the response's doing: 0 and counted as a response error, never a verifier failure (which
    # would drop the sample and veto the judgement)
    # (on a loaded machine it may be judged starved first and again alone: the same verdict, or
    # a marked failure when even alone it got no CPU; never a veto of its group, never a pass)
    assert slow.value == 0.0 and (slow.response_error or "overloaded" in slow.reason), slow
    # parsed in time or not, depending on the machine: never a pass, never a verifier failure
    assert deep.value == 0.0 and not deep.failed
    assert pool.stats["math/response_errors"] + pool.stats["math/errors"] >= 1
    assert time.time() - t0 < 30
  finally:
    pool.close()


def test_math_adversarial_answers_return_within_the_timeout():
  pool = VerifierPool(processes=1, timeout_s=8.0)
  try:
    t0 = time.time()
    out = pool.score_many(
      [
        ("math", "\\boxed{9^{9^{9^9}}}", "3", {}),
        ("math", "\\boxed{" + "{" * 400 + "1" + "}" * 400 + "}", "1", {}),
        ("math", "\\boxed{2}", "2", {}),
      ]
    )
    assert time.time() - t0 < 30
    assert out[0].value == 0.0 and out[2].value == 1.0
  finally:
    pool.close()


# ---------------------------------------------------------------------------------------- code
STDIO = {"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]}


def _py(src):
  return f"<think>plan</think>\n```python\n{src}\n```"


def test_code_correct_partial_and_function_tests():
  assert (
    code.score(_py("import sys\nprint(sum(map(int, sys.stdin.read().split())))"), STDIO).value
    == 1.0
  )
  assert code.score(_py("print(3)"), STDIO).value == 0.5
  fn = {"fn_name": "add", "inputs": [[1, 2], [3, 4]], "outputs": [[3], [7]]}
  assert code.score(_py("def add(a, b):\n    return a + b"), fn).value == 1.0
  cls = {"fn_name": "add", "inputs": [[1, 2]], "outputs": [3]}
  assert (
    code.score(_py("class Solution:\n  def add(self, a, b):\n    return a + b"), cls).value == 1.0
  )
  assert code.score("no code here", STDIO).reason == "no ```python block"
  assert code.score(_py("def f(:\n  pass"), STDIO).reason.endswith("syntax error")
  bad = code.score(_py("print(1)"), "not json")
  assert bad.failed


@pytest.fixture(scope="module")
def listener():
  srv = socket.socket()
  srv.bind(("127.0.0.1", 0))
  srv.listen(5)
  with socket_helpers.counting([srv]) as hits:
    yield srv.getsockname()[1], hits
  srv.close()


def test_hostile_code_is_contained(tmp_path, listener):
  port, hits = listener
  outside = tmp_path / "outside.txt"
  secret = f"s3cret-{os.getpid()}"
  host_file = tmp_path / "expected.txt"  # the expected output, on the host
  host_file.write_text(secret)
  hostile = {
    "read host file": f"print(open({str(host_file)!r}).read())",
    "infinite loop": "while True:\n  pass",
    "fork bomb": "import os\nwhile True:\n  try:\n    os.fork()\n  except OSError:\n    pass",
    "memory bomb": "x = []\nwhile True:\n  x.append(bytearray(10**8))",
    "write outside": f"open({str(outside)!r}, 'w').write('pwned')\nprint(3)",
    "parent env": "import os\nfor p in [os.getppid(), 1] + list(range(2, 400)):\n  try:\n"
    "    e = open(f'/proc/{p}/environ').read()\n  except OSError:\n    continue\n"
    "  if 'PRORL_TEST_SECRET' in e:\n"
    "    print(e.split('PRORL_TEST_SECRET=')[1].split('\\0')[0])",
    "socket": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
    "print(3)",
    "kill parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint(3)",
    "print 1GB": "import sys\nfor _ in range(1100):\n  sys.stdout.write('x' * 2**20)",
    "os.system": f"import os\nos.system('echo pwned > {outside}')\nprint(3)",
    "exit before tests": "import sys\nsys.exit(0)",
  }
  spec = {"inputs": ["1 2\n"], "outputs": [secret]}  # only a program that escaped prints it
  for name, src in hostile.items():
    t0 = time.time()
    s = code.score(_py(src), spec, time_budget_s=3.0)
    assert s.value == 0.0 and not s.failed, (name, s)
    assert s.reason, name
    assert time.time() - t0 < 15, name
  assert not outside.exists()
  assert hits == []  # no connection reached the listener
  # the checks above can fail: the same "read host file" program, unsandboxed, passes
  code.sandbox.allow_unsandboxed(True)
  try:
    leaked = code.score(_py(hostile["read host file"]), spec, time_budget_s=3.0)
  finally:
    code.sandbox.allow_unsandboxed(False)
  assert leaked.value == 1.0


# ------------------------------------------------------------------------------ code comparison
@pytest.mark.parametrize(
  "got,want,same",
  [
    ("3\n", "3\n", True),
    ("3", "3\n\n", True),  # trailing blank lines
    ("1 2  3 \n", "1 2 3", True),  # spacing
    ("1\n2\n3\n", "1 2 3", True),  # line breaks are whitespace
    ("0.3333333", "0.333333333", True),  # decimals within 1e-6
    ("0.334", "0.333", False),
    ("3", "3.0", True),
    ("3", "4", False),
    ("10", "1e1", True),
    ("1 2", "1 2 3", False),  # a missing token
    ("YES", "yes", False),  # case matters
    ("nan", "nan", True),  # equal strings
    ("inf", "1e309", False),
  ],
)
def test_stdout_comparison(got, want, same):
  assert code.same_stdout(got, want) is same


@pytest.mark.parametrize(
  "got,want,same",
  [
    ([1, 2], [[1, 2]], True),  # APPS wraps a list return value in a list
    ([1, 2], [1, 2], True),
    (3, [3], True),
    ([[1, 2], [3]], [[1, 2], [3]], True),  # a tuple of lists arrives as JSON lists
    ([1, 2], [[2, 1]], False),
    (0.1 + 0.2, [0.3], True),
    (0.31, [0.3], False),
    (True, [1], False),  # a bool is not a number
    (1, [True], False),
    ("abc", ["abc"], True),
    ("abc", ["abd"], False),
    ({"a": [1.0]}, [{"a": [1]}], True),
    (None, [None], True),
    (None, [0], False),
  ],
)
def test_function_call_comparison(got, want, same):
  assert code._returned_value_matches(got, want) is same


def test_function_call_tasks_returning_tuples_lists_and_floats():
  tup = {"fn_name": "pair", "inputs": [[1, 2], [3, 4]], "outputs": [[[1, 2]], [[3, 4]]]}
  assert code.score(_py("def pair(a, b):\n  return (a, b)"), tup).value == 1.0
  assert code.score(_py("def pair(a, b):\n  return [a, b]"), tup).value == 1.0
  assert code.score(_py("def pair(a, b):\n  return (b, a)"), tup).value == 0.0
  avg = {"fn_name": "mean", "inputs": [[[1, 2]]], "outputs": [[1.5]]}
  assert code.score(_py("def mean(xs):\n  return sum(xs) / len(xs) + 1e-9"), avg).value == 1.0
  assert code.score(_py("def mean(xs):\n  return 1"), avg).value == 0.0
  sets = {"fn_name": "uniq", "inputs": [[[3, 1, 3]]], "outputs": [[[1, 3]]]}
  assert code.score(_py("def uniq(xs):\n  return set(xs)"), sets).value == 1.0


# ---------------------------------------------------------------------------------------- puzzles
@pytest.mark.parametrize("task", ["basic_arithmetic", "chain_sum", "word_sorting"])
def test_reasoning_gym_tasks(task):
  rows = puzzles.make_items(task, seed=3, size=2)
  entry = rows[0]["extra_info"]["entry"]
  good = f"<think>ok</think><answer>{entry['answer']}</answer>"
  assert puzzles.score(good, rows[0]["reward_model"]["ground_truth"], entry=entry).value == 1.0
  bad = puzzles.score("<answer>definitely wrong 12345</answer>", None, entry=entry)
  assert bad.value < 1.0
  by_index = puzzles.score(
    good, None, **{k: v for k, v in rows[0]["extra_info"].items() if k != "entry"}
  )
  assert by_index.value == 1.0
  assert puzzles.score("no tags", None, entry=entry).reason == "no <answer> tag"


# ---------------------------------------------------------------------------------------- ifeval
IF_CASES = [
  ({"type": "words", "relation": "at least", "num": 3}, "red green blue", "red green"),
  ({"type": "words", "relation": "at most", "num": 2}, "red green", "red green blue"),
  ({"type": "sentences", "relation": "exactly", "num": 2}, "A b. C d!", "A b."),
  ({"type": "paragraphs", "relation": "exactly", "num": 2}, "a\n\nb", "a b"),
  ({"type": "keywords_include", "keywords": ["tea", "cup"]}, "A cup of tea", "A cup"),
  ({"type": "keywords_exclude", "keywords": ["coffee"]}, "tea", "coffee time"),
  ({"type": "keyword_frequency", "keyword": "go", "relation": "at least", "num": 2}, "go go", "go"),
  ({"type": "letter_frequency", "letter": "z", "relation": "at least", "num": 2}, "zz", "z"),
  ({"type": "json_format"}, '```json\n{"a": 1}\n```', "{a: 1}"),
  ({"type": "markdown_bullets", "num": 2}, "* a\n* b", "* a"),
  (
    {"type": "sections", "splitter": "Section", "num": 2},
    "Section 1\nRivers run.\nSection 2\nHills rise.",
    "Section 1\nRivers run.\nSection 2\n.",
  ),
  ({"type": "title"}, "<<My Title>>\ntext", "My Title"),
  ({"type": "lowercase"}, "the rain falls on the roofs", "The rain falls on the roofs"),
  ({"type": "uppercase"}, "THE RAIN FALLS ON THE ROOFS", "THE RAIN FALLS on THE ROOFS"),
  ({"type": "capital_words", "relation": "at least", "num": 2}, "NASA and ESA", "NASA"),
  ({"type": "start_with", "phrase": "Hello"}, "hello world", "world hello"),
  ({"type": "end_with", "phrase": "Any questions?"}, "Done. Any questions?", "Done."),
  ({"type": "no_commas"}, "no commas here", "a, b"),
  ({"type": "quotation"}, '"quoted"', "not quoted"),
  ({"type": "placeholders", "num": 2}, "[name] at [address]", "[name]"),
  ({"type": "postscript", "marker": "P.S."}, "Hi\nP.S. bye", "Hi"),
]


@pytest.mark.parametrize(
  "ins,true_text,false_text", IF_CASES, ids=[c[0]["type"] + str(i) for i, c in enumerate(IF_CASES)]
)
def test_ifeval_each_check(ins, true_text, false_text):
  assert ifeval.check(true_text, ins) is True
  assert ifeval.check(false_text, ins) is False


def test_ifeval_fraction_after_think():
  ins = [{"type": "no_commas"}, {"type": "lowercase"}]
  ok = "all fine and in lower case here"
  assert ifeval.score(f"<think>A, B</think>{ok}", None, instructions=ins).value == 1.0
  assert (
    ifeval.score("<think>x</think>Has, Both of them, yes sir", None, instructions=ins).value == 0.0
  )
  assert (
    ifeval.score("<think>x</think>has, one of them, yes sir", None, instructions=ins).value == 0.5
  )


# ---------------------------------------------------------------------------------------- mcq
@pytest.mark.parametrize(
  "response,ref,want",
  [
    ("<think>..</think>The answer is (C).", "C", 1.0),
    ("<think>..</think>\\boxed{B}", "C", 0.0),
    ("<think>..</think>Answer: 3.0", "3", 1.0),
    ("<think>..</think><answer>Mitochondria</answer>", "mitochondria", 1.0),
    ("<think>..</think>I am not sure", "A", 0.0),
  ],
)
def test_mcq(response, ref, want):
  assert mcq.score(response, ref).value == want


# ---------------------------------------------------------------------------------------- pool
def test_pool_kills_a_stuck_verifier_counts_it_and_keeps_serving():
  pool = VerifierPool(processes=2, timeout_s=3.0)
  try:
    jobs = [
      ("code", _py("while True: pass"), json.dumps(STDIO), {"time_budget_s": 60}),
      ("chain_sum", "<answer>5</answer>", "5", {}),
      ("no_such_source", "x", "y", {}),
    ]
    out = pool.score_many(jobs)
    # stuck on the response past every limit: the response's doing (0), never a dropped sample
    assert out[0].response_error and not out[0].failed and "timeout" in out[0].reason
    assert out[1].value == 1.0 and not out[1].failed
    assert out[2].failed and "no verifier for data_source" in out[2].reason
    assert pool.stats["code/timeouts"] == 1 and pool.stats["code/response_errors"] == 1
    assert pool.stats["no_such_source/errors"] == 1
    again = pool.score_many([("chain_sum", "<answer>5</answer>", "5", {})])
    assert again[0].value == 1.0  # the replaced process serves
  finally:
    pool.close()


def test_an_exception_while_judging_a_response_is_a_response_error_not_a_dropped_sample():
  def broken(response, reference, **_):
    raise RuntimeError("parser gave up")

  s = rewards.safe_score(broken, "x", "y")
  assert s.value == 0.0 and s.response_error and not s.failed and "parser gave up" in s.reason
  unscorable = rewards.safe_score(
    lambda *a, **k: rewards.Score(0.0, "no sandbox", failed=True), "x", "y"
  )
  assert unscorable.failed  # a fault the verifier shows is not the response's stays a failure
  assert rewards.route("deepscaler") is math.score
  with pytest.raises(KeyError, match="no verifier for data_source 'unknown'"):
    rewards.route("unknown")


def test_a_reply_that_fits_any_prompt_meets_no_prohibition_even_on_a_verse_prompt():
  verse = "Write a haiku about Ireland. Do not use any commas in your response."
  ins = [{"type": "no_commas"}]
  for generic in (
    "I am sorry but I cannot help with that request today.",
    "Sure! I would be happy to help with anything else you need today.",
  ):
    assert ifeval.score(generic, None, instructions=ins, prompt_text=verse).value == 0.0
  haiku = (
    "green hills wrapped in mist\nold stones hum beneath the rain\nsheep drift through the fog"
  )
  assert ifeval.score(haiku, None, instructions=ins, prompt_text=verse).value == 1.0
  # the same images on a prompt that asks for prose about something else: not about it
  prose = "Explain how a bank sets its interest rates. Do not use any commas."
  assert ifeval.score(haiku, None, instructions=ins, prompt_text=prose).value == 0.0


SCRIPT_COMMAS = (
  "\u055d\u060c\u3001\uff0c\u201a\u1363\ua4fe\u1802\u2e41"  # Armenian, Arabic, ideographic...
)


@pytest.mark.parametrize("comma", SCRIPT_COMMAS)
def test_every_scripts_comma_is_a_comma(comma):
  text = f"Tea is good{comma} warm{comma} and green in the morning."
  assert not ifeval.check(text, {"type": "no_commas"}), hex(ord(comma))


def test_text_is_read_after_nfkc_fullwidth_stops_end_sentences():
  six = "\uff0e ".join(f"Tea number {w} is good for you" for w in "abcdef") + "\uff0e"
  assert not ifeval.check(six, {"type": "sentences", "relation": "less than", "num": 3})
  assert ifeval.check(six, {"type": "sentences", "relation": "at least", "num": 6})
  bold = "\U0001d413\U0001d41e\U0001d41a is good"  # math-bold capitals read as capitals
  assert not ifeval.check(bold, {"type": "lowercase"})
