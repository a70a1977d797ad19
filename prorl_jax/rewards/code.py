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

import fractions
import functools
import json
import math
import re

import markdown_it

from prorl_jax import sandbox
from prorl_jax.rewards.common import (
  Score,
  blank,
  close,
  load_json,
  read,
  same_token,
  without_think_tag,
)
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


def same_stdout(got: str, want, case_free: bool = False) -> bool:
  """stdin/stdout comparison: whitespace-separated tokens; numbers as the expected one says;
  words in any case where the statement says so (`YES` for `Yes`)."""
  if isinstance(want, list):
    want = "\n".join(map(str, want))
  g, w = str(got).split(), str(want).split()
  if case_free:
    g, w = [t.casefold() for t in g], [t.casefold() for t in w]
  return len(g) == len(w) and all(map(same_token, g, w))


def _finite_number(x) -> bool:
  return isinstance(x, int) or (isinstance(x, float) and math.isfinite(x))


def _same_number(got, want) -> bool:
  if not (_finite_number(got) and _finite_number(want)):
    return False
  if isinstance(want, int):  # an integer: exactly this integer (an integral float only if equal)
    return fractions.Fraction(got) == want
  return close(fractions.Fraction(got), fractions.Fraction(want))


def same_value(got, want) -> bool:
  """Function-call comparison: recursive, lists == tuples, numbers as the expected one says."""
  if isinstance(got, bool) or isinstance(want, bool):
    return got is want if isinstance(got, bool) and isinstance(want, bool) else False
  if isinstance(got, (int, float)) and isinstance(want, (int, float)):
    return _same_number(got, want)
  if isinstance(got, (list, tuple)) and isinstance(want, (list, tuple)):
    return len(got) == len(want) and all(map(same_value, got, want))
  if isinstance(got, dict) and isinstance(want, dict):
    return got.keys() == want.keys() and all(same_value(got[k], want[k]) for k in got)
  return type(got) is type(want) and got == want


def _returned_value_matches(got, want) -> bool:
  if same_value(got, want):
    return True
  # APPS wraps a single return value in a list: [[1, 2]] means "returns [1, 2]".
  return isinstance(want, list) and len(want) == 1 and same_value(got, want[0])


def blank_output(spec: dict) -> int | None:
  """The first stdin/stdout test that expects blank output (refused: a program that prints
  nothing passes it), or None."""
  if spec.get("fn_name"):
    return None
  for k, want in enumerate(spec["outputs"]):
    if blank("\n".join(map(str, want)) if isinstance(want, list) else str(want)):
      return k
  return None


# Programs that solve nothing: what each returns (function-call tasks) or prints (stdin/stdout
# programs) whatever the input; "echo" returns its first argument or prints its input.
CONSTANT_RETURNS = {
  "return None": None, "return 0": 0, "return 1": 1, "return -1": -1, "return True": True,
  "return False": False, 'return ""': "", "return []": [], "return {}": {},
}  # fmt: skip
CONSTANT_PRINTS = ("0", "1", "-1", "YES", "NO", "Yes", "No", "yes", "no", "True", "False")


def _as_args(inp) -> list:
  args = json.loads(inp) if isinstance(inp, str) else inp
  return args if isinstance(args, list) else [args]


def _squash(text: str) -> str:
  return re.sub(r"\s+", "", text)


def _shown_text(value) -> list[str]:
  """How a test's input or output may be written in a statement, squashed (JSON and Python)."""
  if isinstance(value, str):
    return [_squash(value)]
  forms = {_squash(json.dumps(value)), _squash(repr(value))}
  return sorted(forms)


def _shown_at(text: str, parts: list[str], wants: list[str]) -> bool:
  """Do `parts` stand in `text` in order, each within 40 characters of the one before (an
  example's arguments, named or not: `nums=[1,2],k=3`), with a `wants` within a few hundred
  characters after them?"""
  if not parts or sum(map(len, parts)) < 2:
    return False
  at = text.find(parts[0])
  for _ in range(50):  # the first part's first occurrences
    if at < 0:
      return False
    end, ok = at + len(parts[0]), True
    for part in parts[1:]:
      nxt = text.find(part, end)
      if nxt < 0 or nxt - end > 40:
        ok = False
        break
      end = nxt + len(part)
    window = text[end : end + 2 * (end - at) + 300]
    if ok and any(w and w in window for w in wants):
      return True
    at = text.find(parts[0], at + 1)
  return False


def shown_in(spec: dict, statement: str | None) -> list[bool]:
  """Per test: does the statement show it as an example (its input, then its expected output
  within a few hundred characters)? A lookup table of those examples passes exactly them."""
  if not statement:
    return [False] * len(spec["inputs"])
  text, out = _squash(statement), []
  for inp, want in zip(spec["inputs"], spec["outputs"]):
    if spec.get("fn_name"):
      try:
        args = _as_args(inp)
      except ValueError:
        args = [inp]
      forms = [[_shown_text(a)[0] for a in args], [_shown_text(a)[-1] for a in args]]
    else:
      forms = [[k] for k in _shown_text(inp if isinstance(inp, str) else "\n".join(map(str, inp)))]
    wants = _shown_text(
      "\n".join(map(str, want)) if isinstance(want, list) and not spec.get("fn_name") else want
    )
    out.append(any(_shown_at(text, parts, wants) for parts in forms))
  return out


def constant_passes(spec: dict, statement: str | None = None) -> tuple[int, str]:
  """(tests passed, program) of the program that solves nothing and passes the most of `spec`'s
  tests, judged by the same comparisons as a real run (computed, never run): `return None`,
  `return 0`, ..., `print("NO")`, echoing the input; with the problem's `statement`, each of them
  behind a lookup table of the examples it shows (`shown_in`). A score counts only what a
  response passes beyond it; a row every test of which one of them passes is refused at
  prepare."""
  ins, outs = spec["inputs"], spec["outputs"]
  if spec.get("fn_name"):
    tried = {
      name: [_returned_value_matches(value, want) for want in outs]
      for name, value in CONSTANT_RETURNS.items()
    }
    echo = []
    for inp, want in zip(ins, outs):
      try:
        args = _as_args(inp)
      except ValueError:
        args = []
      echo.append(bool(args) and _returned_value_matches(args[0], want))
    tried["return the first argument"] = echo
  else:
    tried = {f"print({v!r})": [same_stdout(v, want) for want in outs] for v in CONSTANT_PRINTS}
    tried["print the input"] = [
      same_stdout(inp if isinstance(inp, str) else "\n".join(map(str, inp)), want)
      for inp, want in zip(ins, outs)
    ]
  shown = shown_in(spec, statement)
  if any(shown):
    tried = {
      f"a lookup of the statement's {sum(shown)} examples, else {k}": [
        a or b for a, b in zip(v, shown)
      ]
      for k, v in tried.items()
    }
  name = max(tried, key=lambda k: sum(tried[k]))
  return sum(tried[name]), name


def unusable_tests(spec: dict, statement: str | None = None) -> str | None:
  """Why a row's tests cannot tell a solution from a program that solves nothing (a test
  expecting blank output; every test passed by one constant program, or by a lookup of the
  examples the statement shows), or None."""
  return _floor(spec, statement)[0]


def _floor(spec: dict, statement: str | None) -> tuple[str | None, int, str]:
  """(why the tests are unusable or None, the tests a program that solves nothing passes, that
  program): `unusable_tests` and the score's credit floor in one computation."""
  if (k := blank_output(spec)) is not None:
    return f"test {k} expects blank output", 0, ""
  floor, constant = constant_passes(spec, statement)
  if spec["outputs"] and floor == len(spec["outputs"]):
    return f"every test passes a program that solves nothing: `{constant}`", floor, constant
  return None, floor, constant


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
  spec = tests if tests is not None else reference
  if isinstance(spec, str):
    try:
      spec = json.loads(spec)
    except ValueError:
      return Score(0.0, "test spec is not valid JSON", failed=True)
  if not isinstance(spec, dict) or "inputs" not in spec or "outputs" not in spec:
    return Score(0.0, "test spec needs 'inputs' and 'outputs'", failed=True)
  if (
    not isinstance(spec["inputs"], list)
    or not isinstance(spec["outputs"], list)
    or len(spec["inputs"]) != len(spec["outputs"])
  ):
    return Score(0.0, "test spec 'inputs' and 'outputs' must be lists of one length", failed=True)
  unusable, floor, constant = _floor(spec, without_think_tag(prompt_text))
  if unusable:
    return Score(0.0, unusable, failed=True)
  said = read(response, prompt_text)
  if said.answer is None:
    return Score(0.0, said.why)
  code = _program_in(said.answer)
  if blank(code):
    return Score(0.0, "no ```python block" if code is None else "empty ```python block")
  if spec.get("preamble"):  # the task's own imports (HumanEval's prompt), before the solution
    code = future_first(f"{spec['preamble']}\n{code}")
  n = len(spec["inputs"])
  if n == 0:
    return Score(0.0, "test spec has no tests", failed=True)
  cases = [_case(spec, inp, want) for inp, want in zip(spec["inputs"], spec["outputs"])]
  try:  # one sandbox for all of this response's tests; they share the time budget
    runs = sandbox.run_cases(
      code,
      cases,
      timeout_s=time_budget_s * wall_factor,  # a second try gets more wall clock, same CPU:
      limits={"cpu_s": max(1, math.ceil(time_budget_s))},  # each process, every try
      fn_name=str(spec["fn_name"]) if spec.get("fn_name") else None,
      prelude=STARTER_IMPORTS if spec.get("fn_name") else "",
    )
  except bwrap.SandboxUnavailable as e:
    return Score(0.0, str(e), failed=True)
  if runs and runs[-1].starved:
    last = runs[-1]
    return Score(
      0.0, f"starved: {last.cpu_seconds:.2f}s of CPU in {last.seconds:.1f}s", starved=True
    )
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
