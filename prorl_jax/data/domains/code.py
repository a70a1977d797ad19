"""The code verifier's domain (`rewards.code`): a program in a python fence; the reference is a
program that looks each test's input up in a table of the expected outputs; the strategies and
attacks are programs (constants, echoes, a lookup of the statement's examples, resource abuse)."""

from __future__ import annotations

import json

from prorl_jax.data import attacks
from prorl_jax.data import honest as honest_lib
from prorl_jax.data.domains import Domain, nudge


def wrap(text: str) -> str:
  return f"<think>done</think>\n```python\n{text}\n```"


def tests(row: dict) -> dict:
  spec = row["extra"].get("tests", row["reference"])
  return json.loads(spec) if isinstance(spec, str) else spec


def answer_of(row: dict) -> str | None:
  return None  # a program, not an answer: `reference`


def lookup_program(spec: dict, outputs: list) -> str:
  """A program that answers each test from a table (stdin text, or the call's arguments)."""
  if spec.get("fn_name"):
    table = {
      json.dumps(list(i) if isinstance(i, list) else [i]): o
      for i, o in zip(spec["inputs"], outputs)
    }
    return (
      "import json\n"
      f"_T = json.loads({json.dumps(json.dumps(table))})\n"
      f"def {spec['fn_name']}(*a):\n  return _T[json.dumps(list(a))]\n"
      f"class Solution:\n  def {spec['fn_name']}(self, *a):\n    return _T[json.dumps(list(a))]\n"
    )
  ins = [i if isinstance(i, str) else "\n".join(map(str, i)) for i in spec["inputs"]]
  outs = [o if isinstance(o, str) else "\n".join(map(str, o)) for o in outputs]
  table = {" ".join(i.split()): o for i, o in zip(ins, outs)}
  return (
    "import json, sys\n"
    f"_T = json.loads({json.dumps(json.dumps(table))})\n"
    "print(_T.get(' '.join(sys.stdin.read().split()), ''))\n"
  )


def reference(row: dict) -> str:
  spec = tests(row)
  return wrap(lookup_program(spec, spec["outputs"]))


def honest(row: dict) -> dict[str, str]:
  spec = tests(row)
  program = lookup_program(spec, spec["outputs"])
  return honest_lib.program_responses(program, stdin=not spec.get("fn_name"))


def _strategies(spec: dict, others: list[dict]) -> dict[str, str]:
  # every expected output of this row's tests and of the other rows', at once
  every = list(spec["outputs"]) + [o for r in others for o in tests(r)["outputs"]][:20] + ["0"]
  out = {
    "empty": "",
    "blank": "   \n",
    "copy_question": "import sys\nprint(sys.stdin.read())",
    "every_candidate": "print(" + repr("\n".join(map(str, every))) + ")",
    "longest": "print('0 ' * 200000)",
    "veto": (
      f"def {spec['fn_name']}(*a):\n  return 10**400\n"
      if spec.get("fn_name")
      else "import sys\nsys.set_int_max_str_digits(0)\nprint(10**4000)"
    ),
  }
  nudged = [nudge(str(o[0] if isinstance(o, list) and len(o) == 1 else o)) for o in spec["outputs"]]
  if all(nudged):
    out["float_for_int"] = lookup_program(
      spec, [float(x) for x in nudged] if spec.get("fn_name") else nudged
    )
  return out


def responses(row: dict, others: list[dict]) -> tuple[str, str, dict[str, str]]:
  """(the lookup program, a program that prints 0, {strategy: program}), each in a fence."""
  spec = tests(row)
  wrong = f"def {spec['fn_name']}(*a):\n  return 0\n" if spec.get("fn_name") else "print(0)"
  raw = _strategies(spec, others)
  return reference(row), wrap(wrong), {k: wrap(v) for k, v in raw.items()}


def attacks_of(prompt: str, extra: dict, answer, spec, seed: int) -> dict[str, list[tuple]]:
  raw = attacks.program_attacks(spec)
  raw["example_lookup"] = [(p, None) for p in attacks.example_lookups(spec, prompt)]
  return raw


DOMAIN = Domain(
  wrap=wrap,
  answer_of=answer_of,
  honest=honest,
  reference=reference,
  responses=responses,
  attacks_of=attacks_of,
  tests=tests,
)
