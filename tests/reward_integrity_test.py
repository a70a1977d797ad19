"""Rewards no policy can game: crafted responses, scored through the rollout worker's own path
(`VerifierPool.score_many`) on items built as `prepare` builds them. Each hack must score 0 and
the honest correct answer beside it 1.0."""

import builtins
import dataclasses
import json
import os
import string
import time

import pytest
import reasoning_gym

from prorl_jax import rewards, sandbox
from prorl_jax.cli import prepare
from prorl_jax.data import suite
from prorl_jax.rewards import code, ifeval, isolate, puzzles
from prorl_jax.rewards.pool import VerifierPool
from prorl_jax.sandbox import confinement
from prorl_jax.trainer import batch
from tests import loop_helpers

ENABLED = tuple(prepare.RG_TASKS) + tuple(suite.RG_OOD_TASKS)


@pytest.fixture(scope="module")
def pool():
  p = VerifierPool(processes=1, timeout_s=30.0)
  yield p
  p.close()


def _rg(task, n=4, seed=11):
  """Items of a task as prepare writes them (the entry regenerated from task/seed/size/index)."""
  rows = puzzles.make_items(task, seed=seed, size=n)
  out = []
  for r in rows:
    meta = {k: v for k, v in r["extra_info"].items() if k != "entry"}
    out.append((r, meta, r["extra_info"]["entry"]))
  return out


def _ans(text):
  return f"<think>ok</think><answer>{text}</answer>"


def _py(src):
  return f"<think>plan</think>\n```python\n{src}\n```"


# --------------------------------------------------- 1. no answer text is ever evaluated
CANARY = "zq_canary_7731"


def test_no_enabled_task_can_reach_an_evaluator_on_the_answer(monkeypatch):
  """eval/exec, sympy's sympify/parse_expr and ast.literal_eval are trapped: a scorer that hands
  them any text carrying the canary fails (n_queens evaluated its answer, countdown parsed it
  with sympy). Parsing to a syntax tree (`ast.parse`, countdown's allowlist) is not evaluating."""
  import ast

  import sympy
  import sympy.parsing.sympy_parser as spp

  reached = []

  def trap(name, real):
    def f(*args, **kwargs):
      if any(CANARY in str(a) for a in args):
        reached.append(name)
        raise RuntimeError(f"{name} reached with the answer")
      return real(*args, **kwargs)

    return f

  for mod, name in [
    (builtins, "eval"),
    (builtins, "exec"),
    (sympy, "sympify"),
    (spp, "parse_expr"),
    (ast, "literal_eval"),
  ]:
    monkeypatch.setattr(mod, name, trap(name, getattr(mod, name)))
  attacks = [
    f"[['Q']] + ['{CANARY}']",
    f"1 + {CANARY}",
    f"__import__('os').getcwd() or {CANARY}",
    f'{{"{CANARY}": 1}}',
  ]
  for task in ENABLED:
    for _, _, entry in _rg(task, n=2):
      for a in attacks:
        s = puzzles.score(_ans(a), None, entry=entry)
        assert s.value == 0.0, (task, a, s)
  assert reached == []


def test_an_answer_that_would_run_as_python_changes_nothing(pool, tmp_path):
  """On a65b89c this n_queens answer was eval'd in the pool process: it wrote a file and rebound
  the scoring function, after which every later response scored 1.0."""
  flag = tmp_path / "pwned"
  (row, meta, entry) = _rg("n_queens", n=1)[0]
  evil = (
    f"[open({str(flag)!r}, 'w').write('x'), "
    "__import__('prorl_jax.rewards', fromlist=['x']).__setattr__('safe_score', "
    "lambda *a, **k: __import__('prorl_jax.rewards', fromlist=['x']).Score(1.0)), "
    "__import__('prorl_jax.rewards.math', fromlist=['x']).__setattr__('score', "
    "lambda *a, **k: __import__('prorl_jax.rewards', fromlist=['x']).Score(1.0))]"
  )
  out = pool.score_many(
    [
      ("reasoning_gym", _ans(evil), None, meta),
      ("math", "<think>x</think>\\boxed{4}", "3", {}),
      ("reasoning_gym", _ans(entry["answer"]), None, meta),
      ("reasoning_gym", _ans("_ _ _\n_ _ _"), None, meta),
    ]
  )
  assert [s.value for s in out] == [0.0, 0.0, 1.0, 0.0], out
  assert not flag.exists()
  again = pool.score_many([("math", "<think>x</think>\\boxed{4}", "3", {})])  # the next request
  assert again[0].value == 0.0


def test_the_throw_away_child_cannot_write_connect_spawn_or_touch_the_pool(tmp_path):
  target = tmp_path / "written"
  state = {"poisoned": False}

  def hostile(path):
    state["poisoned"] = True  # the child's copy only
    blocked = []
    for name, act in [
      ("write", lambda: open(path, "w").write("x")),
      ("socket", lambda: __import__("socket").socket()),
      ("fork", lambda: os.fork()),
      ("exec", lambda: os.execv("/bin/true", ["true"])),
      ("kill", lambda: os.kill(os.getppid(), 0)),
      ("unlink", lambda: os.unlink("/tmp")),
    ]:
      try:
        act()
      except OSError:
        blocked.append(name)
    return rewards.Score(0.5, ",".join(blocked))

  s = isolate.run(hostile, str(target), timeout_s=20)
  assert s.value == 0.5 and s.reason == "write,socket,fork,exec,kill,unlink", s
  assert not target.exists() and state["poisoned"] is False
  # a busy child is the response's doing; one that blew the memory limit too
  spin = isolate.run(lambda: [0 for _ in iter(int, 1)], timeout_s=2)
  # (beside other CPU-bound work the child may get under half a CPU: then it is "starved", not
  # blamed, and the pool scores it again alone - the starvation test below pins that case)
  assert (spin.response_error or spin.starved) and not (spin.response_error and spin.starved)
  assert spin.value == 0.0 and not spin.failed, spin
  hog = isolate.run(lambda: bytearray(4 << 30), timeout_s=20, mem_bytes=256 << 20)
  assert hog.response_error and not hog.failed and hog.value == 0.0, hog


# --------------------------------------------------- 2. restating the question pays nothing
def test_open_ended_tasks_are_not_in_the_mix_and_copying_the_question_earns_nothing(pool):
  assert "propositional_logic" not in prepare.RG_TASKS
  with pytest.raises(ValueError, match="propositional_logic.*not scored"):
    puzzles.check_tasks(["propositional_logic"])
  with pytest.raises(ValueError, match="no reviewed scoring rule"):
    puzzles.check_tasks(["some_new_task"])
  entry = reasoning_gym.create_dataset("propositional_logic", size=1, seed=3)[0]
  premises = " ∧ ".join(f"({p})" for p in entry["metadata"]["premises"])
  got = puzzles.score(_ans(premises), None, entry=json.loads(json.dumps(entry, default=str)))
  assert got.value == 0.0 and got.failed  # refused, never paid
  jobs = []
  for task in ENABLED:
    for row, meta, _ in _rg(task, n=2):
      jobs.append(("reasoning_gym", _ans(row["prompt"][0]["content"]), None, meta))
  out = pool.score_many(jobs)
  assert [s.value for s in out] == [0.0] * len(jobs)
  assert not any(s.failed for s in out)


# --------------------------------------------------- 3. hedges pay nothing
def test_hedges_earn_nothing_and_the_honest_answer_earns_everything(pool):
  jobs, want = [], []

  def add(meta, text, value):
    jobs.append(("reasoning_gym", _ans(text), None, meta))
    want.append(value)

  for _, meta, e in _rg("syllogism"):
    add(meta, "Yes No", 0.0)
    add(meta, e["answer"], 1.0)
  for _, meta, e in _rg("letter_counting"):
    add(meta, "0123456789", 0.0)
    add(meta, " ".join(str(i) for i in range(30)), 0.0)
    add(meta, e["answer"], 1.0)
  for _, meta, e in _rg("caesar_cipher"):
    c = e["metadata"]["cipher_text"]
    shifts = [
      "".join(chr((ord(ch) - 65 + k) % 26 + 65) if ch in string.ascii_uppercase else ch for ch in c)
      for k in range(26)
    ]
    add(meta, "\n".join(shifts), 0.0)
    add(meta, e["answer"], 1.0)
  for _, meta, e in _rg("word_ladder"):
    start, end = e["metadata"]["start_word"], e["metadata"]["end_word"]
    steps, cur = [start], list(start)
    for i, ch in enumerate(end):  # letter by letter, through non-words
      if cur[i] != ch:
        cur[i] = ch
        steps.append("".join(cur))
    add(meta, ",".join(steps), 0.0)
    add(meta, e["answer"], 1.0)
  for _, meta, e in _rg("number_sorting"):
    nums = json.loads(e["answer"].replace("'", '"'))
    off = [str(round(float(x) + 0.4, 1)) for x in nums]  # within the scorer's old tolerance of 1
    add(meta, json.dumps(off), 0.0)
    add(meta, e["answer"], 1.0)
  for _, meta, e in _rg("game_of_life_halting"):
    add(meta, "True False", 0.0)
    add(meta, "False" if e["answer"] == "True" else "True", 0.0)  # any non-empty text paid
    add(meta, e["answer"], 1.0)
  # math: a long box of candidates, out of which math-verify fishes the first that parses
  fished = "\\frac{1}{2}" + " 2 3e8 \\frac{1}{2}1" * 60 + " x" * 3000
  jobs.append(("math", f"<think>x</think>\\boxed{{{fished}}}", "\\frac{1}{2}", {}))
  want.append(0.0)
  jobs.append(("math", "<think>x</think>\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", {}))
  want.append(1.0)
  # multiple choice: several letters at once choose nothing
  for text, value in [("C or A", 0.0), ("A B C D", 0.0), ("(C) A, B", 0.0), ("C", 1.0)]:
    jobs.append(("gpqa", f"<think>x</think>\\boxed{{{text}}}", "C", {}))
    want.append(value)
  out = pool.score_many(jobs)
  assert [s.value for s in out] == want, [(j[1][-60:], s) for j, s in zip(jobs, out)]


# --------------------------------------------------- 4. an empty answer pays nothing
@pytest.mark.parametrize("blank", ["", "   ", "\n\t"])
def test_an_empty_answer_earns_nothing_in_every_domain(pool, blank):
  (row, meta, _) = _rg("syllogism", n=1)[0]
  stdio = json.dumps({"inputs": ["3 4\n", "10 5\n"], "outputs": ["7", "15"]})
  prohibitions = [
    {"type": "no_commas"},
    {"type": "words", "relation": "less than", "num": 40},
    {"type": "keywords_exclude", "keywords": ["tea"]},
  ]
  jobs = [
    ("math", f"<think>x</think>\\boxed{{{blank}}}", "0", {}),
    ("gpqa", f"<think>x</think><answer>{blank}</answer>", "A", {}),
    ("scp", f"<think>x</think>The answer is {blank}", " ", {}),
    ("reasoning_gym", _ans(blank), None, meta),
    ("ifeval", f"<think>x</think>{blank}", None, {"instructions": prohibitions}),
    ("ifeval", blank, None, {"instructions": prohibitions}),
    ("codecontests", _py(blank), stdio, {}),
  ]
  honest = [
    ("math", "<think>x</think>\\boxed{0}", "0", {}),
    ("gpqa", "<think>x</think><answer>A</answer>", "A", {}),
    ("reasoning_gym", _ans(_rg("syllogism", n=1)[0][2]["answer"]), None, meta),
    (
      "ifeval",
      "<think>x</think>A short honest reply without any forbidden word",
      None,
      {"instructions": prohibitions},
    ),
    ("codecontests", _py("print(sum(map(int, input().split())))"), stdio, {}),
  ]
  out = pool.score_many(jobs + honest)
  assert [s.value for s in out] == [0.0] * len(jobs) + [1.0] * len(honest), out


def test_ifeval_needs_a_substantive_answer_but_an_items_own_word_cap_is_kept():
  cap2 = [{"type": "words", "relation": "at most", "num": 2}, {"type": "no_commas"}]
  assert ifeval.score("Yes indeed", None, instructions=cap2).value == 1.0
  assert ifeval.score("ok ok ok ok ok", None, instructions=[{"type": "no_commas"}]).value == 0.0
  assert ifeval.score("Hi", None, instructions=[{"type": "no_commas"}]).value == 0.0


# --------------------------------------------------- 5. a float is not an integer
def test_comparisons_are_decided_by_the_expected_value(pool):
  big = json.dumps({"inputs": [""], "outputs": ["123456789"]})
  fib = {"fn_name": "fib", "inputs": [[90]], "outputs": [2880067194370816120]}
  binet = (
    "def fib(n):\n  r5 = 5 ** 0.5\n  return ((1 + r5) / 2) ** n / r5\n"  # a float, close but wrong
  )
  binet_print = "r5 = 5 ** 0.5\nprint(((1 + r5) / 2) ** 90 / r5)"
  fib_io = json.dumps({"inputs": [""], "outputs": ["2880067194370816120"]})
  exact = "def fib(n):\n  a, b = 0, 1\n  for _ in range(n):\n    a, b = b, a + b\n  return a\n"
  half = json.dumps({"inputs": [""], "outputs": ["0.5"]})
  out = pool.score_many(
    [
      ("codecontests", _py("print(123456700.0)"), big, {}),
      ("codecontests", _py("print(123456789)"), big, {}),
      ("codecontests", _py("print(123456789.0)"), big, {}),  # exactly the integer
      ("codecontests", _py(binet), json.dumps(fib), {}),
      ("codecontests", _py(exact), json.dumps(fib), {}),
      ("codecontests", _py(binet_print), fib_io, {}),
      ("codecontests", _py("print(0.5000000001)"), half, {}),  # a float target: tolerance
      ("gpqa", "<think>x</think>Answer: 3.0000001", "3", {}),
      ("gpqa", "<think>x</think>Answer: 3.0", "3", {}),
    ]
  )
  assert [s.value for s in out] == [0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0], out


# --------------------------------------------------- 6. no response can veto its group
def test_a_response_that_breaks_its_judgement_scores_zero_and_is_never_a_verifier_failure(pool):
  ret = {"fn_name": "f", "inputs": [[1]], "outputs": [1.5]}
  ret_int = {"fn_name": "f", "inputs": [[1]], "outputs": [[1, 2]]}
  deep = "[" * 100_000 + "]" * 100_000
  items = [
    ("codecontests", _py("def f(x):\n  return 10**400"), json.dumps(ret), {}),
    ("codecontests", _py(f"import json\ndef f(x):\n  return json.loads('{deep}')"), ret_int, {}),
    (
      "codecontests",
      _py(f"import sys\nsys.setrecursionlimit(10**6)\ndef f(x):\n  return {'[' * 300}{']' * 300}"),
      ret_int,
      {},
    ),
    ("math", "<think>x</think>\\boxed{9^{9^{9^{9}}}}", "3", {"timeout_s": 2}),
    ("ifeval", "<think>x</think>" + deep, None, {"instructions": [{"type": "json_format"}]}),
  ]
  t0 = time.time()
  out = pool.score_many(items)
  assert time.time() - t0 < 60
  assert [s.value for s in out] == [0.0] * len(items), out
  assert not any(s.failed for s in out), out
  # a reference the verifier cannot read is its own fault: marked, never a judgement
  bad_ref = pool.score_many([("math", "<think>x</think>\\boxed{1}", "\\frac{", {})])[0]
  assert bad_ref.failed or bad_ref.value == 0.0


def test_a_verifier_fault_drops_that_sample_never_its_group():
  import numpy as np

  g = loop_helpers.group(
    [1.0, 0.0, 0.0, 1.0], verifier_failed=[False, False, True, False], prompt_ids=[5, 6], width=2
  )
  kept = batch.without_failed_samples(g)
  assert kept is not None
  np.testing.assert_allclose(kept.raw_scores, [1.0, 0.0, 2 / 3, 1.0], rtol=1e-6)
  shaped = batch.shape_scores(
    [kept],
    max_len=4,
    truncation_penalty=1.0,
    length_penalty_on=False,
    lp_min=0,
    lp_max=0,
    overlong_buffer=0,
    overlong_factor=0,
  )
  np.testing.assert_allclose(shaped[0], [1.0, 0.0, 2 / 3, 1.0], rtol=1e-6)
  b = batch.build_batch([kept], prompt_len=2, response_len=2, pad_id=0, rows=4)
  assert b.loss_mask_BxT.sum(axis=1).tolist() == [2, 2, 0, 2]  # the failed sample never trains
  adv = batch.token_advantages("reinforce_pp_baseline", shaped, b.loss_mask_BxT)
  assert np.all(adv[2] == 0) and adv[0, 2] > 0 > adv[1, 2]
  one_left = dataclasses.replace(g, verifier_failed=np.array([True, True, True, False]))
  assert batch.without_failed_samples(one_left) is None  # no baseline: the group goes


# --------------------------------------------------- 7. the sandboxes are capped as a whole
HOG = (
  "import os, time\n"
  "kids = []\n"
  "for _ in range(3):\n"
  "  pid = os.fork()\n"
  "  if pid == 0:\n"
  "    x = bytearray(300 << 20)\n"
  "    for i in range(0, len(x), 4096):\n"
  "      x[i] = 1\n"
  "    time.sleep(1.5)\n"
  "    os._exit(0)\n"
  "  kids.append(pid)\n"
  "ok = sum(os.waitpid(p, 0)[1] == 0 for p in kids)\n"
  "print(ok, open('/proc/self/oom_score_adj').read().strip())\n"
)


def test_all_sandboxes_of_a_run_share_one_memory_ceiling():
  if sandbox.check():
    pytest.fail(f"the sandbox must run here: {sandbox.check()}")
  try:
    # (a cgroup where this host allows one, else per-sandbox limits: both must hold the budget)
    how = confinement.set_run_limits(
      memory_bytes=8 << 30, pids=256, concurrent=1, name="prorl-test-a"
    )
    free = sandbox.run(HOG, timeout_s=20)
    assert free.stdout.split() == ["3", "1000"], (how, free)  # 900 MB fit 8 GiB; first to go
    how = confinement.set_run_limits(
      memory_bytes=512 << 20, pids=256, concurrent=1, name="prorl-test-b"
    )
    capped = sandbox.run(HOG, timeout_s=20)
    survivors = int(capped.stdout.split()[0]) if capped.stdout.split() else 0
    assert survivors < 3, (how, capped)  # three 300 MB processes never fit 512 MiB
  finally:
    confinement.set_run_limits(confinement.RUN_MEMORY_BYTES, confinement.RUN_PIDS, 2)


def test_without_a_cgroup_the_per_sandbox_limits_fit_the_run_budget(monkeypatch):
  monkeypatch.setattr(confinement, "make_cgroup", lambda *a: None)
  monkeypatch.setenv("PRORL_SANDBOX_SHARERS", "2")
  try:
    how = confinement.set_run_limits(memory_bytes=4 << 30, pids=256, concurrent=2)
    lim = dict(confinement.LIMITS, **confinement.RUN_LIMITS["limits"])
    sandboxes = 2 * 2  # two workers, two verifier processes each
    assert sandboxes * (lim["nproc"] * lim["mem_bytes"] + lim["tmpfs_bytes"]) <= 4 << 30, how
    assert "no cgroup" in how
  finally:
    monkeypatch.undo()
    confinement.set_run_limits(confinement.RUN_MEMORY_BYTES, confinement.RUN_PIDS, 2)


# --------------------------------------------------- 8. a starved run is judged again
def test_a_correct_solution_starved_by_a_sibling_is_judged_again_alone():
  """A wrong sibling fills the machine with busy loops while a correct solution runs beside it:
  the correct one hits the wall clock with little CPU time while it wanted the CPU (starved) and
  is judged again alone; the sibling, whose own process only slept, is a plain timeout: 0."""
  spec = json.dumps({"inputs": [""], "outputs": ["ok"]})
  hog = (
    "import os, time\n"
    "for _ in range(28):\n"
    "  if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    while True:\n"
    "      pass\n"
    "time.sleep(30)\n"
  )
  # ~1 s of CPU alone, started once the sibling's loops are running (so it is starved)
  work = "import time\ntime.sleep(0.5)\ns = 0\nfor i in range(15_000_000):\n  s += i\nprint('ok')"
  # The pool and every sandbox it starts share one CPU, so 28 loops starve the work on a host
  # of any size (on a 32-core host they would not fill the machine).
  cpus = os.sched_getaffinity(0)
  os.sched_setaffinity(0, {min(cpus)})
  pool = VerifierPool(processes=2, timeout_s=60.0)
  try:
    # both verifier processes warmed (imports, the sandbox's probe), so the sibling's loops start
    # while the correct solution runs, not after it
    alone = pool.score_many([("codecontests", _py(work), spec, {"time_budget_s": 3.0})] * 2)
    assert [s.value for s in alone] == [1.0, 1.0], alone
    out = pool.score_many(
      [
        ("codecontests", _py(hog), spec, {"time_budget_s": 3.0}),
        ("codecontests", _py(work), spec, {"time_budget_s": 3.0}),
      ]
    )
    assert out[1].value == 1.0 and not out[1].failed, out
    assert out[0].value == 0.0 and not out[0].failed, out  # a timeout or a response error
    assert pool.stats["codecontests/starved"] >= 1
  finally:
    pool.close()
    os.sched_setaffinity(0, cpus)


def test_a_timeout_with_little_cpu_is_starved_and_one_that_computed_is_not():
  def timed_out(cpu, preempted):
    return sandbox.RunResult("", "", None, True, seconds=3.0, cpu_seconds=cpu, preempted=preempted)

  assert timed_out(0.2, preempted=True).starved  # wanted the CPU and got little: other load
  assert not timed_out(0.2, preempted=False).starved  # slept or blocked: its own doing
  assert not timed_out(2.9, preempted=True).starved  # computed: slow
  sleeper = code.score(
    _py("import time\ntime.sleep(30)"), {"inputs": [""], "outputs": ["2718"]}, time_budget_s=2
  )
  assert sleeper.value == 0.0 and not sleeper.starved and not sleeper.failed, sleeper
  spin = code.score(
    _py("while True:\n  pass"), {"inputs": [""], "outputs": ["2718"]}, time_budget_s=2
  )
  assert spin.value == 0.0 and not spin.starved and not spin.failed


def test_numbers_are_decided_by_the_reference_in_every_verifier(pool):
  """A percentage is read in the scale the reference uses (7% is 7, never also 0.07); 0 equals
  only 0 (math-verify alone rounds to 6 places; an absolute tolerance calls 6.6e-34 zero)."""
  cases = [
    ("deepscaler", "\\boxed{7\\%}", "7", 1.0),
    ("deepscaler", "\\boxed{7\\%}", "0.07", 0.0),
    ("deepscaler", "\\boxed{0.07}", "7\\%", 0.0),
    ("deepscaler", "\\boxed{0.0}", "\\frac{1}{6^{10}}", 0.0),
    ("deepscaler", "\\boxed{0}", "7.2\\times10^{-21}", 0.0),
    ("deepscaler", "\\boxed{0}", "0", 1.0),
    ("deepscaler", "\\boxed{\\frac{1}{6^{10}}}", "\\frac{1}{6^{10}}", 1.0),
    ("scp", "\\boxed{0.0}", "6.6\\times10^{-34}\\ \\text{J s}", 0.0),
    ("scp", "\\boxed{0}", "6.6e-34", 0.0),
    ("scp", "\\boxed{6.63\\times10^{-34}}", "6.6e-34", 1.0),
    ("scp", "\\boxed{7\\%}", "0.07", 0.0),
    ("scp", "\\boxed{7\\%}", "7\\%", 1.0),
  ]
  out = pool.score_many([(d, f"<think>x</think>{a}", r, {}) for d, a, r, _ in cases])
  # code, printed and returned: the same rule (the second test tells programs from constants)
  stdout = lambda want: json.dumps({"inputs": ["1", "2"], "outputs": [want, "2"]})
  call = lambda want: json.dumps({"fn_name": "f", "inputs": [[1], [2]], "outputs": [want, 2]})
  prints = lambda v: _py(f"x = input()\nprint({v} if x == '1' else 2)")
  returns = lambda v: _py(f"def f(x):\n  return {v} if x == 1 else 2")
  cases += [
    ("codecontests", prints("0.0"), stdout("6.6e-34"), 0.0),
    ("codecontests", prints("'6.6000001e-34'"), stdout("6.6e-34"), 1.0),
    ("codecontests", prints("0"), stdout("0.000000"), 1.0),
    ("codecontests", prints("1e-9"), stdout("0.000000"), 0.0),
    ("codecontests", returns("0.0"), call(1e-30), 0.0),
    ("codecontests", returns("1e-30 * (1 + 1e-9)"), call(1e-30), 1.0),
  ]
  out += pool.score_many([(d, a, r, {}) for d, a, r, _ in cases[len(out) :]])
  got = [(c[1], c[2], s.value) for c, s in zip(cases, out)]
  assert [s.value for s in out] == [c[3] for c in cases], got


def test_instructions_read_the_text_as_a_reader_sees_it(pool):
  """A fullwidth comma is a comma, a zero-width space or soft hyphen hides no forbidden word,
  math-bold capitals are capitals; the honest answer beside them keeps its credit."""
  body = "Tea is a calm drink that many people enjoy every single morning"
  cases = [
    ([{"type": "no_commas"}], body + "\uff0c truly.", 0.0),
    ([{"type": "no_commas"}], body + " truly.", 1.0),
    ([{"type": "keywords_exclude", "keywords": ["calm"]}], body.replace("calm", "ca\u200blm"), 0.0),
    ([{"type": "keywords_exclude", "keywords": ["calm"]}], body.replace("calm", "ca\u00adlm"), 0.0),
    ([{"type": "keywords_exclude", "keywords": ["calm"]}], body.replace("calm", "quiet"), 1.0),
    (
      [{"type": "capital_words", "relation": "at most", "num": 1}],
      body + " \U0001d400\U0001d401\U0001d402 \U0001d403\U0001d404.",
      0.0,
    ),
    ([{"type": "capital_words", "relation": "at most", "num": 1}], body + " ABC.", 1.0),
  ]
  out = pool.score_many(
    [("ifeval", f"<think>x</think>{t}", None, {"instructions": i}) for i, t, _ in cases]
  )
  assert [s.value for s in out] == [c[2] for c in cases], [s.reason for s in out]
