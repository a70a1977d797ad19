"""Code: run the last fenced python block against the item's tests in the bubblewrap sandbox.

Tests come in the PRIME/TACO/APPS formats: `{"inputs": [...], "outputs": [...]}`, compared the
way each format means them:
- stdin/stdout programs (no `fn_name`): the input is fed on stdin; the output matches when its
  whitespace-separated tokens equal the expected ones (line breaks and spacing are free);
- function-call tasks (`"fn_name"`): each input is the argument list; the returned value (as
  JSON: tuples are lists) matches the expected one recursively, and an expected value wrapped in
  a one-element list (APPS's convention) matches either way.
Numbers are compared as the *expected* value says: an expected integer needs the same integer
(a float only when exactly that integer: `123456700.0` never passes for `123456789`); only an
expected decimal (`0.5`, `1e-3`, a float value) allows 1e-6 of itself (relative: 0 only 0).
Comparisons are exact (decimal and rational arithmetic), total (never raise: a returned `10**400`
is just wrong) and bounded (returned JSON deeper than 64 levels is wrong). NaN and infinities
never match. A test that expects blank output is refused (any silent program would pass it).
A `"preamble"` (the task's own code, e.g. HumanEval's imports and helper functions) runs before
the solution. The program is the last Python code block (`extract_code`); it runs with `exit()`
and `quit()`, and a function-call task with the imports LiveCodeBench's harness gives starter
code (`STARTER_IMPORTS`: `typing`, `collections`, ...).

Score = fraction of tests passed beyond what the best constant program passes
(`constant_passes`: `return None`, `print("NO")`, echoing the input, ...; such a program earns
0, a correct one 1); all tests share one wall-clock budget (5 s by default). A run
that writes more stdout than the cap (the larger of 1 MiB and twice the expected output) fails
that test with a reason; output is never compared on a prefix. When the sandbox cannot run here
the item is a marked verifier failure naming the fix (`prorl_jax/sandbox/`), never a 0.
"""

from __future__ import annotations

import functools
import json
import math
import re

import markdown_it

from prorl_jax import sandbox
from prorl_jax.rewards import detectors
from prorl_jax.rewards.code_tests import (  # noqa: F401 - `code.<name>` for the data side
  CONSTANT_PRINTS,
  CONSTANT_RETURNS,
  GUESS_LEVEL,
  _as_args,
  _floor,
  _returned_value_matches,
  constant_passes,
  guess_passes,
  same_stdout,
  same_value,
  shown_in,
  unusable_tests,
)
from prorl_jax.rewards.common import Score, blank, load_json, read, without_think_tag
from prorl_jax.sandbox import bwrap, confinement

PYTHON_FENCES = ("python", "py", "python3", "py3", "python2")
# What LiveCodeBench's harness imports before a function-call (starter code) solution: LeetCode
# starter code annotates with `List` and `Optional` and never imports them.
STARTER_IMPORTS = (
  "from typing import *\nfrom collections import *\nfrom heapq import *\n"
  "from bisect import *\nfrom itertools import *\nfrom functools import *\n"
  "import math, heapq, bisect, itertools, functools, collections, string, re\n"
)


@functools.cache
def _markdown() -> markdown_it.MarkdownIt:
  return markdown_it.MarkdownIt("commonmark")


def extract_code(response: str, prompt_text: str | None = None) -> str | None:
  """The program of a response's final answer (`common.read`: after its think block): the last
  fenced code block whose language is Python (`python`, `py`, `python3`, ...), else the last one
  with no language; fences are read as CommonMark reads them (a ```` ```text ```` block of sample
  output beside it is not code)."""
  text = read(response, prompt_text).answer
  return None if text is None else _program_in(text)


def _program_in(text: str) -> str | None:
  """The program of a final answer's text (see `extract_code`)."""
  fences = [t for t in _markdown().parse(text) if t.type == "fence"]
  lang = [(t.info.strip().split() or [""])[0].strip("{}.").lower() for t in fences]
  for want in (PYTHON_FENCES, ("",)):
    found = [t.content for t, g in zip(fences, lang) if g in want]
    if found:
      return found[-1]
  return None


_FUTURE = re.compile(r"^from\s+__future__\s+import\s+[^\n]+\n?", re.M)


def future_first(program: str) -> str:
  """`from __future__` imports moved to the top (Python accepts them nowhere else): a completion
  that opens with one still runs after the task's preamble."""
  found = _FUTURE.findall(program)
  return "".join(f if f.endswith("\n") else f + "\n" for f in found) + _FUTURE.sub("", program)


# How statements say that letter case does not matter (Codeforces: "You can output the answer in
# any case (upper or lower)... "yEs", "yes", "Yes", and "YES" will be recognized")
_ANY_CASE = re.compile(
  r"\b(?:output|print|answer|letters?|words?|strings?)\b[^.\n]{0,80}\bin\s+any\s+(?:letter\s+)?case\b"
  r"|\bcase[- ]insensitive\b|\bany\s+register\b"
  r"|\bwill\s+(?:all\s+)?be\s+recogni[sz]ed\s+as\b",
  re.I,
)


def any_case(prompt_text: str | None) -> bool:
  """Does the problem statement accept its words in any letter case?"""
  return bool(prompt_text) and _ANY_CASE.search(prompt_text) is not None


def hack_flags(final: str, response: str, prompt_text: str | None) -> list[str]:
  """The detectors' flags of a code answer: a program that never reads its input."""
  program = extract_code(response, prompt_text)
  return ["constant_program"] if program and detectors.constant_program(program) else []


def _fail_reason(res: sandbox.RunResult) -> str:
  if res.output_overflow:
    return "output over the stdout cap"
  if res.timed_out:
    return "timeout"
  if "SyntaxError" in res.stderr:
    return "syntax error"
  if res.returncode is not None and res.returncode < 0:
    return f"killed by signal {-res.returncode}"
  last = res.stderr.strip().splitlines()[-1:] or [f"exit {res.returncode}"]
  return last[0][:120]


def _case(spec: dict, inp, want) -> dict:
  """One test as a sandbox case; its stdout cap leaves room for twice the expected output."""
  cap = max(confinement.LIMITS["stdout_bytes"], 2 * len(json.dumps(want)) + 4096)
  if spec.get("fn_name"):
    return {"args": _as_args(inp), "stdout_bytes": cap}
  return {"stdin": inp if isinstance(inp, str) else "\n".join(map(str, inp)), "stdout_bytes": cap}


def _judge(spec: dict, res: sandbox.RunResult, want, case_free: bool = False) -> tuple[bool, str]:
  """(passed, reason) of one test case's run."""
  if not res.ok:
    return False, _fail_reason(res)
  if not spec.get("fn_name"):
    return same_stdout(res.stdout, want, case_free), "wrong"
  parts = res.stdout.rsplit(sandbox.RESULT_MARK, 1)
  if len(parts) != 2:
    return False, "no return value"
  try:
    got = load_json(parts[1])
  except ValueError as e:
    return False, f"return value is not bounded JSON ({str(e)[:60]})"
  return _returned_value_matches(got, want), "wrong"


def _spec(tests, reference) -> tuple[dict | None, Score | None]:
  """The item's test spec (`tests`, else `reference`: a dict or its JSON string), or the
  verifier's failure when it is not one."""
  spec = tests if tests is not None else reference
  if isinstance(spec, str):
    try:
      spec = json.loads(spec)
    except ValueError:
      return None, Score(0.0, "test spec is not valid JSON", failed=True)
  if not isinstance(spec, dict) or "inputs" not in spec or "outputs" not in spec:
    return None, Score(0.0, "test spec needs 'inputs' and 'outputs'", failed=True)
  inputs, outputs = spec["inputs"], spec["outputs"]
  if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
    why = "test spec 'inputs' and 'outputs' must be lists of one length"
    return None, Score(0.0, why, failed=True)
  return spec, None


def _program(response: str, prompt_text: str | None, spec: dict) -> tuple[str | None, Score | None]:
  """The response's program after its think block (the task's preamble first), or why none."""
  said = read(response, prompt_text)
  if said.answer is None:
    return None, Score(0.0, said.why)
  code = _program_in(said.answer)
  if blank(code):
    return None, Score(0.0, "no ```python block" if code is None else "empty ```python block")
  if spec.get("preamble"):  # the task's own imports (HumanEval's prompt), before the solution
    code = future_first(f"{spec['preamble']}\n{code}")
  return code, None


def _run(code: str, spec: dict, time_budget_s: float, wall_factor: float):
  """The program on every test in one sandbox (they share the time budget)."""
  cases = [_case(spec, inp, want) for inp, want in zip(spec["inputs"], spec["outputs"])]
  return sandbox.run_cases(
    code,
    cases,
    timeout_s=time_budget_s * wall_factor,  # a second try gets more wall clock, same CPU:
    limits={"cpu_s": max(1, math.ceil(time_budget_s))},  # each process, every try
    fn_name=str(spec["fn_name"]) if spec.get("fn_name") else None,
    prelude=STARTER_IMPORTS if spec.get("fn_name") else "",
  )


def _credit(spec: dict, runs, prompt_text: str | None, floor: int, constant: str) -> Score:
  """The share of tests passed above the floor (what a program that solves nothing passes)."""
  n = len(spec["inputs"])
  passed, reasons, case_free = 0, [], any_case(prompt_text)
  for res, want in zip(runs, spec["outputs"]):
    ok, why = _judge(spec, res, want, case_free)
    passed += ok
    if not ok:
      reasons.append(why)
  if len(runs) < n:
    reasons.append("timeout (total budget)")
  reason = f"{passed}/{n} tests passed" + (f"; first failure: {reasons[0]}" if reasons else "")
  if floor:
    reason += f"; {floor} of them pass `{constant}` too: credit above that"
  return Score(max(0, passed - floor) / (n - floor), reason)


def score(
  response: str,
  reference,
  *,
  tests=None,
  time_budget_s: float = 5.0,
  wall_factor: float = 1.0,
  prompt_text: str | None = None,
  **_,
) -> Score:
  """`tests` (or `reference`) is the item's test spec, a dict or its JSON string."""
  spec, bad = _spec(tests, reference)
  if bad:
    return bad
  unusable, floor, constant = _floor(spec, without_think_tag(prompt_text))
  if unusable:
    return Score(0.0, unusable, failed=True)
  code, refused = _program(response, prompt_text, spec)
  if refused:
    return refused
  if not spec["inputs"]:
    return Score(0.0, "test spec has no tests", failed=True)
  try:
    runs = _run(code, spec, time_budget_s, wall_factor)
  except bwrap.SandboxUnavailable as e:
    return Score(0.0, str(e), failed=True)
  if runs and runs[-1].starved:
    last = runs[-1]
    why = f"starved: {last.cpu_seconds:.2f}s of CPU in {last.seconds:.1f}s"
    return Score(0.0, why, starved=True)
  return _credit(spec, runs, prompt_text, floor, constant)
