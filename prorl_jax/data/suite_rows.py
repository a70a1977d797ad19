"""The evaluation suite's row converters: each benchmark's dataset-card columns to a verl-schema
row (the prompt as chat messages, the verifier's data_source and reference, the benchmark in
`extra_info`); a row that cannot be scored raises `Malformed` with the column that made it so."""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import pickletools
import zlib
from typing import Callable

import numpy as np

from prorl_jax.data import mix as P
from prorl_jax.data.hub import Malformed
from prorl_jax.rewards import code

MATH_INSTRUCTION = P.BOXED_INSTRUCTION


LCB_WINDOW = ("2024-08-01", "2025-02-01")


def _answer(v, column: str = "answer") -> str:
  """A reference answer as text: 142.0 -> "142", ["$3$"] -> "3", "$x$" -> "x"."""
  if isinstance(v, list):
    v = ", ".join(_answer(x, column) for x in v)
  if isinstance(v, float) and v.is_integer():
    v = int(v)
  text = str(v).strip() if v is not None else ""
  text = text.strip("$").strip()
  if not text:
    raise Malformed(f"column {column!r} is empty")
  if text.lower() in ("nan", "inf", "-inf"):
    raise Malformed(f"column {column!r} is not a finite number")
  return text


def math_converter(problem: str, answer: str, data_source: str) -> Callable[[dict], dict]:
  """A converter of math benchmark rows with the problem in column `problem` and the answer in
  column `answer`, under `data_source`."""

  def convert(row: dict) -> dict:
    q = P.text_field(row, problem)
    return P.verl_row(
      P.user_prompt(f"{q} {MATH_INSTRUCTION}"),
      data_source,
      _answer(row.get(answer), answer),
      "math",
      {},
    )

  return convert


def _code_budget(n_tests: int) -> float:
  """Wall seconds for all of a response's tests (under the verifier pool's 30 s limit)."""
  return float(min(25.0, 5.0 + 0.25 * n_tests))


def _code_row(prompt: str, data_source: str, tests: dict) -> dict:
  if unusable := code.unusable_tests(tests, prompt):
    raise Malformed(unusable)
  try:
    truth = json.dumps(tests, allow_nan=False)
  except (TypeError, ValueError):
    raise Malformed("test values are not plain data") from None
  return P.verl_row(
    P.user_prompt(prompt),
    data_source,
    truth,
    "code",
    {"time_budget_s": _code_budget(len(tests["inputs"]))},
  )


def _check_body(test: str) -> dict[str, object]:
  """The literal assignments inside HumanEval+'s `def check(candidate)` (parsed, never run)."""
  try:
    tree = ast.parse(test)
  except SyntaxError:
    raise Malformed("test code does not parse") from None
  out = {}
  for node in ast.walk(tree):
    if isinstance(node, ast.FunctionDef) and node.name == "check":
      for st in node.body:
        if (
          isinstance(st, ast.Assign)
          and len(st.targets) == 1
          and isinstance(st.targets[0], ast.Name)
        ):
          try:
            out[st.targets[0].id] = ast.literal_eval(st.value)
          except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            out[st.targets[0].id] = None
  return out


def prompt_context(prompt: str, entry: str) -> str:
  """What a HumanEval prompt defines besides the function to write (its imports, helper
  functions and constants): the harness runs the prompt before the completion, so a solution may
  call them. Falls back to the import lines when the prompt does not parse."""
  try:
    tree = ast.parse(prompt)
  except SyntaxError:
    return "\n".join(ln for ln in prompt.splitlines() if ln.startswith(("import ", "from ")))
  lines = prompt.splitlines()
  keep = [
    "\n".join(lines[n.lineno - 1 - len(getattr(n, "decorator_list", [])) : n.end_lineno])
    for n in tree.body
    if not (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry)
    and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))  # docstrings
  ]
  return "\n".join(keep)


def reference_outputs(program: str, entry: str, inputs: list) -> list:
  """The values `entry` returns on each argument list, run in the code sandbox (a row whose
  `test` computes its expected results with a reference function); `Malformed` naming the
  column when the reference solution does not return plain data on every input."""
  from prorl_jax import sandbox  # lazy: only rows without a results table
  from prorl_jax.sandbox import bwrap  # lazy: only rows without a results table

  cases = [{"args": list(i)} for i in inputs]
  try:
    runs = sandbox.run_cases(
      program,
      cases,
      timeout_s=_code_budget(len(cases)),
      fn_name=entry,
      prelude=code.STARTER_IMPORTS,
    )
  except bwrap.SandboxUnavailable as e:
    raise Malformed(f"column 'test' needs the code sandbox to compute its results ({e})") from None
  out = []
  for k, res in enumerate(runs):
    parts = res.stdout.rsplit(sandbox.RESULT_MARK, 1)
    if not res.ok or len(parts) != 2:
      raise Malformed(f"column 'canonical_solution' fails on test input {k}")
    try:
      out.append(json.loads(parts[1]))
    except ValueError:
      raise Malformed(f"column 'canonical_solution' returns no plain data on input {k}") from None
  if len(out) != len(inputs):
    raise Malformed("column 'canonical_solution' runs out of time on its test inputs")
  return out


def convert_humanevalplus(row: dict) -> dict:
  """A HumanEval+ row as a function-call code row: its `test` table of inputs and expected
  results becomes the tests (a `test` that computes its results with a reference function gets
  them from the row's `canonical_solution`, run in the sandbox); the prompt's imports and helper
  functions run before the solution. `Malformed` when the inputs are not plain data."""
  prompt, entry = P.text_field(row, "prompt"), P.text_field(row, "entry_point")
  body = _check_body(P.text_field(row, "test"))
  inputs = body.get("inputs")
  outputs = body.get("results", body.get("exp_out"))
  if outputs is None and isinstance(inputs, list) and inputs and row.get("canonical_solution"):
    # the raw columns: the solution's body is indented to continue the prompt's function
    program = str(row["prompt"]).rstrip("\n") + "\n" + str(row["canonical_solution"])
    outputs = reference_outputs(program, entry, [list(i) for i in inputs])
  if not (
    isinstance(inputs, list)
    and isinstance(outputs, list)
    and inputs
    and len(inputs) == len(outputs)
  ):
    raise Malformed("column 'test' is not a literal inputs/results table")
  context = prompt_context(prompt, entry)
  text = (
    "Complete the following Python function. Write the whole function (with any imports "
    f"it needs) in one ```python code block.\n\n```python\n{prompt.rstrip()}\n```"
  )
  tests = {"fn_name": entry, "inputs": [list(i) for i in inputs], "outputs": outputs}
  if context.strip():
    tests["preamble"] = context
  return _code_row(text, "humanevalplus", tests)


_PICKLE_STR_OPS = {
  "PROTO",
  "FRAME",
  "SHORT_BINUNICODE",
  "BINUNICODE",
  "BINUNICODE8",
  "MEMOIZE",
  "STOP",
}


def _pickled_text(data: bytes) -> str:
  """The one string a pickle holds, read from its opcodes (nothing is executed); any other
  pickle is malformed."""
  texts, ops = [], pickletools.genops(data)
  while True:
    try:
      op, arg, _ = next(ops)
    except StopIteration:
      break
    except ValueError:
      raise Malformed("column 'private_test_cases' is not a readable pickle") from None
    if op.name not in _PICKLE_STR_OPS:
      raise Malformed(f"column 'private_test_cases' holds a pickled {op.name}, not text")
    if isinstance(arg, str):
      texts.append(arg)
  if len(texts) != 1:
    raise Malformed("column 'private_test_cases' is not one pickled string")
  return texts[0]


def lcb_tests(text: str) -> list:
  """LiveCodeBench test cases: JSON, or base64(zlib(pickle(JSON text)))."""
  if not text:
    return []
  if text.lstrip().startswith("["):
    return json.loads(text)
  try:
    raw = zlib.decompress(base64.b64decode(text, validate=True))
  except (ValueError, zlib.error):
    raise Malformed("column 'private_test_cases' is neither JSON nor base64/zlib data") from None
  text = _pickled_text(raw)
  try:
    return json.loads(text)
  except ValueError:
    raise Malformed("column 'private_test_cases' is not JSON") from None


def _json_column(row: dict, column: str):
  value = row.get(column)
  if not isinstance(value, str):
    raise Malformed(f"column {column!r} is not JSON text")
  try:
    return json.loads(value)
  except ValueError:
    raise Malformed(f"column {column!r} is not JSON") from None


def convert_livecodebench(row: dict, window: tuple[str, str] = LCB_WINDOW) -> dict:
  """A LiveCodeBench row dated inside `window` as a stdin/stdout code row with its public and
  private tests; `Malformed` names the column outside the window or unreadable."""
  date = str(row.get("contest_date") or "")[:10]
  if not window[0] <= date < window[1]:
    raise Malformed(f"column 'contest_date' outside [{window[0]}, {window[1]})")
  question = P.text_field(row, "question_content")
  meta, cases = (_json_column(row, c) for c in ("metadata", "public_test_cases"))
  if not isinstance(cases, list):
    raise Malformed("column 'public_test_cases' is not a list")
  private = row.get("private_test_cases")
  if not isinstance(private, str):
    raise Malformed("column 'private_test_cases' is not text")
  cases = cases + lcb_tests(private)
  if not cases:
    raise Malformed("columns 'public_test_cases' and 'private_test_cases' hold no tests")
  fn = meta.get("func_name") if isinstance(meta, dict) else None
  starter = (row.get("starter_code") or "").strip()
  try:
    if fn:
      inputs = [[json.loads(a) for a in c["input"].split("\n") if a.strip()] for c in cases]
      outputs = [json.loads(c["output"]) for c in cases]
    else:
      inputs = [c["input"] for c in cases]
      outputs = [c["output"] for c in cases]
  except (KeyError, TypeError, AttributeError, ValueError):
    raise Malformed(
      "column 'public_test_cases'/'private_test_cases': a test lacks input/output text"
    ) from None
  if fn and starter:
    how = (
      f"Complete this starter code (the method `{fn}` is called with each test's "
      f"arguments):\n```python\n{starter}\n```"
    )
  else:
    how = "Read the input from stdin and write the answer to stdout."
  text = (
    f"Solve the following programming problem in Python.\n\n{question}\n\n{how}\n"
    "Put your complete solution in one ```python code block."
  )
  tests = {"inputs": inputs, "outputs": outputs}
  if fn:
    tests["fn_name"] = fn
  return _code_row(text, "livecodebench", tests)


def convert_gpqa(row: dict) -> dict:
  """A GPQA row as a four-choice question whose choices are shuffled with a seed from the
  question text (the same order every run); the reference is the correct letter."""
  question = P.text_field(row, "Question")
  right = P.text_field(row, "Correct Answer")
  wrong = [P.text_field(row, f"Incorrect Answer {i}") for i in (1, 2, 3)]
  seed = int.from_bytes(hashlib.sha256(question.encode()).digest()[:4], "little")
  order = np.random.RandomState(seed).permutation(4)
  choices = [([right] + wrong)[i] for i in order]
  key = "ABCD"[int(np.where(order == 0)[0][0])]
  lines = "\n".join(f"{k}) {c}" for k, c in zip("ABCD", choices))
  text = (
    f"{question}\n\n{lines}\n\nThink step by step, then give the letter of the correct "
    "choice within \\boxed{}."
  )
  return P.verl_row(P.user_prompt(text), "gpqa", key, "stem", {})


def convert_ifeval(row: dict) -> dict:
  text = P.text_field(row, "prompt")
  instructions = P.ifeval_instructions(row.get("instruction_id_list"), row.get("kwargs"), "kwargs")
  return P.verl_row(
    P.user_prompt(text), "ifeval", "", "instruction_following", {"instructions": instructions}
  )


def convert_prime_val(row: dict) -> dict:
  return P.convert_eurus_code(row)
