r"""Honest correct answers in the formats reasoning models write, built from a row's reference:
what the verifier audit (`data/audit.py`) checks earns full credit beside the hacks it refuses.
Each domain writes its reference in these forms (`data.domains`: its `honest` hook).

Every response opens with a closed think block (as DeepSeek-R1-Distill, Qwen and
Llama-Nemotron write) and then states the reference the way those models state an answer:
`The final answer is $\boxed{X}$`, a `**Final Answer**` heading over a display box, `\(\boxed{X}\)`
inside a sentence; a multiple-choice key as `\boxed{\text{C}}`, bold, `Answer: C) <the choice's
text>`, `(C)`; a number with digit groups (`3{,}600`) or in scientific notation; a program in a
` ```python3 ` fence that ends with `exit()`, beside a ` ```text ` block of its sample output.
"""

from __future__ import annotations

import re

THINK = "<think>\nLet me work through this carefully, checking each step once more.\n</think>\n\n"

MATH_WRAPPERS = (
  "The final answer is $\\boxed{{{x}}}$.",
  "**Final Answer**\n\\[\n\\boxed{{{x}}}\n\\]",
  "So the answer is \\(\\boxed{{{x}}}\\).",
  "### Final Answer\nThe answer is: $\\boxed{{{x}}}$",
)
LETTER_FORMS = (
  "\\boxed{{{k}}}",
  "\\boxed{{\\text{{{k}}}}}",
  "\\boxed{{\\textbf{{{k}}}}}",
  "\\boxed{{({k})}}",
  "**Answer: {k}**",
  "The answer is **{k}**.",
  "Answer: ({k})",
  "The correct option is {k}.",
  "**Final Answer:** {k}",
)
ANSWER_TAG_WRAPPERS = ("<answer>{x}</answer>", "The answer is:\n<answer>\n{x}\n</answer>")


def _groups(x: str) -> list[str]:
  """A plain integer of 4+ digits with digit groups, as models write it (3{,}600, 3\\,600)."""
  if not re.fullmatch(r"-?\d{4,}", x):
    return []
  head, body = ("-", x[1:]) if x.startswith("-") else ("", x)
  parts = []
  while body:
    parts.insert(0, body[-3:])
    body = body[:-3]
  return [head + sep.join(parts) for sep in ("{,}", "\\,", ",")]


def math_forms(answer: str) -> list[str]:
  """Ways to write a math reference's value: as it is, and with digit groups."""
  return [answer] + _groups(answer.strip())


def program_responses(program: str, stdin: bool = True) -> dict[str, str]:
  """{style: response} for a correct program: the fences and endings models write (a stdin
  program may end with `exit()` or `quit()` after printing)."""
  body = program.rstrip("\n")
  end_exit, end_quit = ("\nexit()", "\nquit()") if stdin else ("", "")
  return {
    "code/python": f"{THINK}```python\n{body}\n```",
    "code/python3_exit": f"{THINK}```python3\n{body}{end_exit}\n```",
    "code/quit_and_sample": (
      f"{THINK}Here is the solution:\n\n```py\n{body}{end_quit}\n```\n\n"
      "Sample run:\n\n```text\n(sample output)\n```"
    ),
  }
