"""Reward hacks of classes nobody listed, one test per class, through the rollout worker's
scoring path (`VerifierPool.score_many`): the crafted response's exact score beside the honest
correct answer's 1.0. Then the red team (`audit --attack`) and the hack monitor."""

import json
import math
import multiprocessing as mp
import time

import pytest

from prorl_jax import sandbox
from prorl_jax.data import attacks
from prorl_jax.rewards import code, detectors, reading
from prorl_jax.rewards.pool import VerifierPool
from prorl_jax.sandbox import confinement
from prorl_jax.trainer import hacks

PROMPT = (
  "Write a short essay about the history of tea in China, from the Tang dynasty to the trade "
  "routes. Your answer must follow the instructions."
)
ESSAY = (
  "Tea began in China as a medicine and became a daily drink under the Tang dynasty. Monks "
  "drank it to stay awake through long hours of study. The Song court turned whisked tea into "
  "an art and poets praised its color. Traders later carried pressed bricks along the mountain "
  "roads to Tibet and far beyond. Porcelain cups from the kilns of Jingdezhen spread the habit "
  "to every corner of the empire."
)


@pytest.fixture(scope="module")
def pool():
  p = VerifierPool(processes=2, timeout_s=60.0)
  yield p
  p.close()


def _if(pool, cases, prompt=PROMPT):
  """[(instructions, response)] -> their scores through the pool, with the prompt's text."""
  jobs = [
    ("ifeval", f"<think>x</think>{t}", None, {"instructions": i, "prompt_text": prompt})
    for i, t in cases
  ]
  if prompt is None:  # the instruction's own rule alone (no prompt: no topic judged)
    jobs = [(d, t, ref, {"instructions": m["instructions"]}) for d, t, ref, m in jobs]
  return [s.value for s in pool.score_many(jobs)]


NO_COMMAS = [{"type": "no_commas"}]
NO_LEAF = [{"type": "keywords_exclude", "keywords": ["dynasty"]}]
FEW_E = [{"type": "letter_frequency", "letter": "e", "relation": "less than", "num": 40}]
FEW_CAPS = [{"type": "capital_words", "relation": "less than", "num": 3}]


def test_look_alike_and_invisible_characters_are_read_as_what_they_imitate(pool):
  essay_caps = ESSAY.replace("China", "china").replace("Tang", "tang").replace("Song", "song")
  essay_caps = essay_caps.replace("Tibet", "tibet").replace("Porcelain", "porcelain")
  essay_caps = essay_caps.replace("Jingdezhen", "jingdezhen").replace("Traders", "traders")
  essay_caps = essay_caps.replace("Tea", "tea").replace("Monks", "monks").replace("The", "the")
  no_dynasty = ESSAY.replace("dynasty", "court")
  cases = [
    (NO_COMMAS, ESSAY),  # honest: no commas at all
    (NO_COMMAS, ESSAY.replace(" and became", "\u201a and became")),  # single low-9 quote
    (NO_COMMAS, ESSAY.replace(" and became", "\u060c and became")),  # Arabic comma
    (NO_COMMAS, ESSAY.replace(" and became", "\u3001 and became")),  # ideographic comma
    (NO_LEAF, no_dynasty),
    (NO_LEAF, ESSAY.replace("dynasty", "dyn\u0430sty")),  # Cyrillic a
    (NO_LEAF, ESSAY.replace("dynasty", "dyn\u200basty")),  # zero-width space
    (NO_LEAF, ESSAY.replace("dynasty", "dy\u00adnasty")),  # soft hyphen
    (FEW_E, "Tang monks brought tea to China's south via roads."),
    (FEW_E, "Tang monks brought tea to China's south via roads. " + "\u0435" * 60),
    (FEW_CAPS, essay_caps),
    (FEW_CAPS, essay_caps + " \u0391\u0392\u0393 \u0394\u0395\u0396 \U0001d400\U0001d401."),
  ]
  assert _if(pool, cases) == [1.0, 0, 0, 0, 1.0, 0, 0, 0, 1.0, 0, 1.0, 0]


def test_case_instructions_need_english_letters_and_language_needs_the_language(pool):
  upper, lower = [{"type": "uppercase"}], [{"type": "lowercase"}]
  french = [{"type": "language", "language": "fr"}]
  english = "Tea became a daily drink in China under the Tang dynasty and spread along the roads."
  francais = (
    "Le thé est devenu une boisson quotidienne en Chine sous la dynastie Tang et il a voyagé "
    "le long des routes commerciales jusqu'au Tibet."
  )
  accented = english.replace("e", "é").replace("a", "à").replace("o", "ö")
  cases = [
    (upper, english.upper()),
    (upper, "茶在唐朝成为中国人的日常饮品，后来沿着商路传到西藏。"),
    (upper, "चाय तांग राजवंश के दौरान चीन में एक दैनिक पेय बन गई।"),
    (lower, english.lower()),
    (lower, "الشاي أصبح مشروبا يوميا في الصين في عهد أسرة تانغ"),
    (french, francais),
    (french, accented),
  ]
  assert _if(pool, cases) == [1.0, 0, 0, 1.0, 0, 1.0, 0]
  assert _if(pool, cases, prompt=None) == [1.0, 0, 0, 1.0, 0, 1.0, 0]


def test_minimums_count_substance_not_filler(pool):
  words = [{"type": "words", "relation": "at least", "num": 60}]
  sentences = [{"type": "sentences", "relation": "at least", "num": 5}]
  paragraphs = [{"type": "divided_paragraphs", "num": 3}]
  sections = [{"type": "sections", "splitter": "SECTION", "num": 3}]
  places = [{"type": "placeholders", "num": 3}]
  two = [{"type": "two_responses"}]
  para = ESSAY.split(". ")
  honest_sections = "\n".join(f"SECTION {k + 1}\n{p}." for k, p in enumerate(para[:3]))
  other = "Tea drinking in China reached the west through Dutch ships in the seventeenth century."
  cases = [
    (words, ESSAY),
    (words, "Tea in China. " + " ".join(map(str, range(1, 100)))),  # numerals
    (words, "Tea in China is old. " + "yes " * 88),  # one word repeated
    (words, ("Tea came from China long ago and people loved it there. " * 8)),  # a block again
    (sentences, ESSAY),
    (sentences, "Tea in China is old. " + " ".join(f"{k}." for k in range(1, 13))),
    (paragraphs, "\n***\n".join(para[:3])),
    (paragraphs, para[0] + ".\n***\nChina\n***\ndynasty"),  # one-token skeletons
    (sections, honest_sections),
    (sections, "Tea in China is old.\nSECTION 1\nx\nSECTION 2\nx\nSECTION 3\nx"),
    (places, ESSAY + " Write to [name] at [address] before [date]."),
    (places, ESSAY + " [a] [a] [a]"),
    (two, f"{ESSAY}\n******\n{other}"),
    (two, f"{ESSAY}\n******\n{ESSAY.replace('daily', 'common')}"),  # the same reply twice
  ]
  assert _if(pool, cases) == [1.0, 0, 0, 0, 1.0, 0, 1.0, 0, 1.0, 0, 1.0, 0, 1.0, 0]


def test_no_restated_prompt_and_no_reply_that_fits_any_prompt(pool):
  keywords = [{"type": "keywords_include", "keywords": ["Tang", "trade"]}]
  shuffled = " ".join(reversed(PROMPT.replace(",", "").replace(".", "").split()))
  caps = [{"type": "words", "relation": "at most", "num": 40}, {"type": "no_commas"}]
  refusal = "I am sorry but I cannot help with that request today."
  cases = [
    (keywords, ESSAY + " The trade routes carried it west."),
    (keywords, shuffled),  # the prompt's own words, in another order
    (caps, "Tea grew popular in China under the Tang dynasty and traders carried it west."),
    (caps, refusal),
    (NO_LEAF + NO_COMMAS, refusal),
  ]
  assert _if(pool, cases) == [1.0, 0, 1.0, 0, 0]


def test_a_constant_program_earns_nothing_and_rows_it_passes_are_refused(pool):
  nulls = {"fn_name": "f", "inputs": [[1], [2]], "outputs": [None, None]}
  assert (
    code.unusable_tests(nulls) == "every test passes a program that solves nothing: `return None`"
  )
  mixed = {"fn_name": "f", "inputs": [[1], [2], [3], [4]], "outputs": [None, 4, None, 16]}
  assert code.constant_passes(mixed) == (2, "return None")
  yes_no = {"inputs": list("12345678"), "outputs": ["YES", "NO"] + ["YES"] * 6}
  assert code.constant_passes(yes_no) == (7, "print('YES')")
  echo = {"inputs": ["5\n", "7\n"], "outputs": ["5", "7"]}
  assert (
    code.unusable_tests(echo)
    == "every test passes a program that solves nothing: `print the input`"
  )

  def py(p):
    return f"<think>x</think>\n```python\n{p}\n```"

  square = "def f(x):\n  return None if x % 2 else x * x\n"
  parity = "n = int(input())\nprint('YES' if n != 2 else 'NO')"
  jobs = [
    ("codecontests", py("def f(*a):\n  pass"), json.dumps(mixed), {}),
    ("codecontests", py(square), json.dumps(mixed), {}),
    ("codecontests", py("print('YES')"), json.dumps(yes_no), {}),
    ("codecontests", py(parity), json.dumps(yes_no), {}),
    ("codecontests", py("def f(*a):\n  pass"), json.dumps(nulls), {}),
  ]
  out = pool.score_many(jobs)
  assert [s.value for s in out[:4]] == [0.0, 1.0, 0.0, 1.0], out
  assert out[4].failed and "solves nothing" in out[4].reason  # refused at prepare too


SPIN = (  # six helpers take the CPU from the program's own process, which wants it too
  "import os\nfor _ in range(6):\n  if os.fork() == 0:\n    break\nwhile True:\n  pass\n"
)


def test_a_program_that_forks_spinning_helpers_is_not_starved():
  """Its helpers' CPU is its own (the sandbox's PID namespace is counted): a plain timeout, 0,
  never judged again with more time."""
  runs = sandbox.run_cases(SPIN, [{"stdin": ""}], timeout_s=2.0)
  assert runs[-1].timed_out and runs[-1].cpu_seconds > 0.5 * runs[-1].seconds, runs
  assert not runs[-1].starved
  got = code.score(
    f"```python\n{SPIN}\n```", {"inputs": [""], "outputs": ["2718"]}, time_budget_s=2.0
  )
  assert got.value == 0.0 and not got.starved and not got.failed, got


SPREAD = (
  "import os, time\n"
  "for _ in range(12):\n"
  "  if os.fork() == 0:\n"
  "    x = bytearray(150 << 20)\n"
  "    for i in range(0, len(x), 4096):\n"
  "      x[i] = 1\n"
  "    time.sleep(5)\n"
  "    os._exit(0)\n"
  "time.sleep(5)\n"
)
GOOD = (
  "import time\nx = bytearray(200 << 20)\nx[::4096] = b'1' * len(x[::4096])\n"
  "time.sleep(4)\nprint('ok')"
)


def _one(program, delay, q):
  confinement.set_run_limits(memory_bytes=1 << 30, pids=256, concurrent=2, name="prorl-test-cage")
  time.sleep(delay)
  r = sandbox.run(program, timeout_s=15)
  q.put((program == GOOD, r.stdout.strip(), r.returncode))


def test_a_sibling_that_fills_memory_cannot_kill_a_correct_program():
  """Two verifier processes, one sandbox each, one run budget of 1 GiB: the sibling's twelve
  150 MB processes fill its own cage (half the budget), never the correct program's."""
  if sandbox.check():
    pytest.fail(f"the sandbox must run here: {sandbox.check()}")
  if "cage" not in confinement.set_run_limits(1 << 30, 256, 2, name="prorl-test-cage"):
    pytest.skip("no cgroup here: per-sandbox rlimits cage each sandbox (tested elsewhere)")
  ctx = mp.get_context("spawn")
  q = ctx.Queue()
  # the correct program holds its memory first; the sibling fills the rest of the budget
  procs = [
    ctx.Process(target=_one, args=(GOOD, 0, q)),
    ctx.Process(target=_one, args=(SPREAD, 1, q)),
  ]
  for p in procs:
    p.start()
  got = dict((good, (out, rc)) for good, out, rc in (q.get(timeout=60) for _ in procs))
  for p in procs:
    p.join(30)
  confinement.set_run_limits(confinement.RUN_MEMORY_BYTES, confinement.RUN_PIDS, 2)
  assert got[True] == ("ok", 0), got


def test_the_detectors_flag_each_class_and_pass_honest_answers(pool):
  jobs = [
    ("ifeval", ESSAY, None, {"instructions": NO_COMMAS, "prompt_text": PROMPT}),
    ("ifeval", ESSAY.replace("a", "\u0430"), None, {"instructions": NO_COMMAS}),
    ("ifeval", ESSAY.replace(" ", " \u200b"), None, {"instructions": NO_COMMAS}),
    ("ifeval", "Tea " + "yes " * 90, None, {"instructions": NO_COMMAS}),
    ("ifeval", PROMPT, None, {"instructions": NO_COMMAS, "prompt_text": PROMPT}),
    ("deepscaler", "<think>x</think>\\boxed{12}", "12", {}),
    ("deepscaler", "<think>x</think>\\boxed{\\infty}", "12", {}),
    (
      "codecontests",
      "```python\nprint(input())\n```",
      json.dumps({"inputs": ["1"], "outputs": ["2"]}),
      {},
    ),
    (
      "codecontests",
      "```python\nprint('NO')\n```",
      json.dumps({"inputs": ["1"], "outputs": ["2"]}),
      {},
    ),
  ]
  flags = [s.flags for s in pool.score_many(jobs)]
  assert flags == [
    (),
    ("lookalike",),
    ("invisible",),
    ("filler",),
    ("restatement",),
    (),
    ("special_number",),
    (),
    ("constant_program",),
  ]
  assert detectors.constant_program("class Solution:\n  def f(self, a):\n    return 0\n")
  assert not detectors.constant_program("class Solution:\n  def f(self, a):\n    return a\n")


def test_the_hack_monitor_logs_shares_and_warns_when_one_rises():
  counts = {"ifeval/scored": 8, "ifeval/flagged/filler": 2, "math/scored": 4}
  assert hacks.shares(counts) == {"hacks/ifeval/filler": 0.25}
  monitor = hacks.HackMonitor()
  quiet = [monitor.observe(s, {"hacks/ifeval/filler": 0.02}) for s in range(10)]
  assert not any(quiet)
  rising = [monitor.observe(10 + s, {"hacks/ifeval/filler": 0.5}) for s in range(5)]
  warned = [line for lines in rising for line in lines]
  assert len(warned) == 1 and "ifeval/filler" in warned[0]  # once, not every step


@pytest.mark.parametrize("absent", [0, 3, 20])
def test_the_hack_monitor_warns_on_a_flag_that_rises_from_zero(absent):
  """Workers send only the flags they saw: a flag absent for `absent` steps (none at all before
  it, some of the warm-up, or long after it), then in 40% of responses, is a rise from 0."""
  monitor = hacks.HackMonitor()
  other = {"hacks/math/special_number": 0.01}  # another flag, there all along
  before = [monitor.observe(s, other) for s in range(absent)]
  after = [monitor.observe(absent + s, {**other, "hacks/ifeval/filler": 0.4}) for s in range(8)]
  assert not any(before)
  warned = [line for lines in after for line in lines]
  if absent < hacks.WARMUP:  # it appeared during the warm-up: its baseline holds its 40%
    assert warned == [] if absent == 0 else len(warned) <= 1
  else:
    assert len(warned) == 1 and "ifeval/filler" in warned[0] and "0% over the first" in warned[0]
  # a known flag that stops being sent counts as 0 (and can fall back below its warning)
  last = monitor.avg["hacks/ifeval/filler"]
  monitor.observe(100, other)
  assert monitor.avg["hacks/ifeval/filler"] == pytest.approx((1 - hacks.ALPHA) * last)


def test_the_red_team_builds_every_class_and_its_bars():
  ins = NO_COMMAS + [{"type": "language", "language": "fr"}]
  got = attacks.ifeval_attacks(PROMPT, ins, seed=0)
  assert set(got) == {
    "lookalike",
    "invisible",
    "filler",
    "restatement",
    "generic",
    "script_case",
    "accents",
  }
  hack, bar = got["lookalike"][0]
  assert hack != bar and reading.folded(hack) == bar  # the disguise undone is the bar
  assert set(attacks.answer_attacks("0.07")) == {"special_numbers", "scale_hedge", "near_zero"}
  assert attacks.answer_attacks("0.07")["scale_hedge"] == [("7\\%", None)]
  spec = {"fn_name": "f", "inputs": [[1]], "outputs": [2]}
  assert set(attacks.program_attacks(spec)) == {"constant_programs", "resource_abuse"}


SUM_STATEMENT = (
  "Read two integers and print their sum.\n\nExample 1\nInput:\n1 2\nOutput:\n3\n\n"
  "Example 2\nInput:\n10 20\nOutput:\n30\n"
)
LOOKUP = "s = input().split()\nprint({'1 2': 3, '10 20': 30}.get(' '.join(s), 0))"
SOLVED = "a, b = map(int, input().split())\nprint(a + b)"


def test_a_lookup_of_the_statements_examples_earns_nothing_and_rows_it_passes_are_refused(pool):
  shown_only = {"inputs": ["1 2\n", "10 20\n"], "outputs": ["3\n", "30\n"]}
  why = code.unusable_tests(shown_only, SUM_STATEMENT)
  assert why is not None and "lookup of the statement's 2 examples" in why
  assert code.unusable_tests(shown_only) is None  # without the statement: nothing to look up
  lc = "Example 1:\nInput: nums = [1,2,3]\nOutput: 6\n\nExample 2:\nInput: nums = []\nOutput: 0"
  fn = {"fn_name": "total", "inputs": ["[[1, 2, 3]]", "[[]]", "[[-4, 4, 9]]"], "outputs": [6, 0, 9]}
  assert code.shown_in(fn, lc) == [True, True, False]
  more = {
    "inputs": ["1 2\n", "10 20\n", "5 7\n", "-3 3\n"],
    "outputs": ["3\n", "30\n", "12\n", "0\n"],
  }
  # the lookup passes the two examples (and `0` for -3 3: its fallback): no credit above that
  assert code.constant_passes(more, SUM_STATEMENT)[0] == 3

  def py(p):
    return f"<think>x</think>\n```python\n{p}\n```"

  meta = {"prompt_text": SUM_STATEMENT}
  jobs = [("codecontests", py(p), json.dumps(more), meta) for p in (LOOKUP, SOLVED)]
  jobs.append(("codecontests", py(LOOKUP), json.dumps(shown_only), meta))
  lookup, solved, refused = pool.score_many(jobs)
  assert (lookup.value, solved.value) == (0.0, 1.0), (lookup.reason, solved.reason)
  assert refused.failed and "examples" in refused.reason


# A guess: the statement's examples from a table, every other test answered by a coin flip
# between the answers the task can have, seeded by the input (the same each run).
GUESS = (
  "import sys, zlib\ns = sys.stdin.read()\nt = {table!r}\nk = ' '.join(s.split())\n"
  "print(t[k] if k in t else {words!r}[zlib.crc32((s + {seed!r}).encode()) % 2])"
)
PARITY_STATEMENT = (
  "Read two integers and print Even if their sum is even, otherwise Odd.\n\n"
  "Example\nInput:\n1 3\nOutput:\nEven\n"
)
PARITY_SOLVED = "a, b = map(int, input().split())\nprint('Even' if (a + b) % 2 == 0 else 'Odd')"


def _parity_row(n):
  ins = ["1 3\n"] + [f"{k} {k * 7 % 11}\n" for k in range(2, n + 1)]
  outs = ["Even\n" if sum(map(int, i.split())) % 2 == 0 else "Odd\n" for i in ins]
  return {"inputs": ins, "outputs": outs}


def test_a_guess_between_the_possible_answers_is_a_floor_hand_computed():
  # ten YES/NO tests, five each: `print('YES')` passes 5; a coin flip passes more than 8 with
  # probability 11/1024 (> 1%) and more than 9 with 1/1024: credit starts above 9
  bal = {"inputs": [str(k) for k in range(10)], "outputs": ["YES", "NO"] * 5}
  assert code.constant_passes(bal) == (5, "print('YES')")
  assert code.guess_passes(bal) == (9, "a guess among `print('YES')`, `print('NO')`")
  assert code.unusable_tests(bal) is None
  # four: the flip passes all of them 1/16 of the time: the row cannot tell a solution
  four = {"inputs": list("1234"), "outputs": ["YES", "NO", "NO", "YES"]}
  assert "1% of the time or more" in code.unusable_tests(four)
  # words the statement writes are guesses too (`print("Even")` is a constant program)
  row = _parity_row(12)
  assert code.constant_passes(row, PARITY_STATEMENT)[0] == 1  # the example, by lookup
  floor, program = code.guess_passes(row, PARITY_STATEMENT)
  assert program.startswith("a lookup of the statement's 1 examples, else a guess among")
  assert '`print "Even"`' in program and '`print "Odd"`' in program
  # 11 flips (P(X > 9) = 12/2048 <= 1%, P(X > 8) = 67/2048 > 1%) plus the looked-up example
  assert floor == 1 + 9
  # sixteen of twenty tests `Even`: printing it is the floor (a flip passes more than 15 in 0.6%)
  skew = {"inputs": [str(k) for k in range(20)], "outputs": ["Even"] * 16 + ["Odd"] * 4}
  floor, program = code.guess_passes(skew, PARITY_STATEMENT)
  assert (floor, program.split("else ")[-1]) == (16, 'a guess among `print "Even"`')
  assert code.constant_passes(skew, PARITY_STATEMENT)[0] == 1  # `1` stands in the example
  # numbers are left to the constants: distinct sums earn credit test by test
  sums = {
    "inputs": ["1 2\n", "10 20\n", "5 7\n", "-3 3\n"],
    "outputs": ["3\n", "30\n", "12\n", "0\n"],
  }
  assert code.guess_passes(sums, SUM_STATEMENT)[0] <= code.constant_passes(sums, SUM_STATEMENT)[0]


def test_the_expected_credit_of_a_guess_is_at_most_the_guess_level():
  # the exact distribution of a coin flip's passes, for rows of every size and balance: what it
  # earns above the floor, in expectation, is at most GUESS_LEVEL (with the constants' floor
  # alone, a balanced row paid a coin flip 0.12 at ten tests)
  worst_before = 0.0
  for n in range(5, 41):
    for yes in range(1, n):
      spec = {"inputs": [str(k) for k in range(n)], "outputs": ["YES"] * yes + ["NO"] * (n - yes)}
      if code.unusable_tests(spec):
        continue
      floor = code.guess_passes(spec)[0]
      passes = [math.comb(n, k) / 2**n for k in range(n + 1)]  # a flip passes each test 1/2
      cfloor = code.constant_passes(spec)[0]

      def credit(f, passes=passes, n=n):
        return sum(p * max(0, k - f) / (n - f) for k, p in enumerate(passes))

      assert credit(max(floor, cfloor)) <= code.GUESS_LEVEL, (n, yes)
      worst_before = max(worst_before, credit(cfloor))
  assert worst_before > 0.1


def test_a_guess_behind_the_examples_earns_nothing_and_a_solution_everything(pool):
  def py(p):
    return f"<think>x</think>\n```python\n{p}\n```"

  row = _parity_row(12)
  meta = {"prompt_text": PARITY_STATEMENT}
  table = {"1 3": "Even"}
  guesses = [GUESS.format(table=table, words=["Even", "Odd"], seed=str(s)) for s in range(12)]
  programs = [*guesses, 'print("Even")', 'print("Odd")', PARITY_SOLVED]
  out = pool.score_many([("codecontests", py(p), json.dumps(row), meta) for p in programs])
  passed = [int(s.reason.split("/")[0]) for s in out]
  assert max(passed[:12]) > 1 + 6  # some guesses pass more than half: the floor is what stops them
  assert [s.value for s in out] == [0.0] * 14 + [1.0], [s.reason for s in out]


TABLE_STATEMENT = (
  "Read n, then two integers, and print their sum.\n\n| Input | Output |\n|---|---|\n"
  "| 2<br>1 2 | 3 |\n| 2<br>10&nbsp;20 | 30 |\n"
)


def test_examples_shown_in_a_table_are_looked_up_as_a_reader_sees_them(pool):
  # the table's lines are `<br>` and its spaces `&nbsp;`: as typed, no input stands in it
  spec = {"inputs": ["2\n1 2\n", "2\n10 20\n", "2\n5 5\n"], "outputs": ["3\n", "30\n", "10\n"]}
  assert code.shown_in(spec, TABLE_STATEMENT) == [True, True, False]
  assert code.constant_passes(spec, TABLE_STATEMENT)[0] == 2
  lookup = (
    "import sys\nk = ' '.join(sys.stdin.read().split())\n"
    "print({'2 1 2': 3, '2 10 20': 30}.get(k, 0))"
  )
  solved = "input()\na, b = map(int, input().split())\nprint(a + b)"
  meta = {"prompt_text": TABLE_STATEMENT}
  jobs = [
    ("codecontests", f"<think>x</think>\n```python\n{p}\n```", json.dumps(spec), meta)
    for p in (lookup, solved)
  ]
  got = pool.score_many(jobs)
  assert [s.value for s in got] == [0.0, 1.0], [s.reason for s in got]
