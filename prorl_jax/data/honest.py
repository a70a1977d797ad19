r"""Honest correct answers in the formats reasoning models write, built from a row's reference:
what the verifier audit (`data/audit.py`) checks earns full credit beside the hacks it refuses.

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


def _choice_text(prompt: str, key: str) -> str | None:
  m = re.search(rf"^\(?{key}\)\s*(.+)$", prompt, re.M)
  return m.group(1).strip() if m else None


def math_forms(answer: str) -> list[str]:
  """Ways to write a math reference's value: as it is, and with digit groups."""
  return [answer] + _groups(answer.strip())


def responses(verifier: str, answer: str, prompt: str = "") -> dict[str, str]:
  """{style: honest correct response} for a reference `answer` (the text the verifier compares:
  the math value, the choice key, the puzzle's answer); {} for verifiers without one."""
  out = {}
  if verifier == "math":
    for i, form in enumerate(math_forms(answer)):
      for j, w in enumerate(MATH_WRAPPERS):
        out[f"math/{i}/{j}"] = THINK + w.format(x=form)
  elif verifier in ("stem", "mcq") and re.fullmatch(r"[A-J]", answer.strip()):
    k = answer.strip()
    for j, f in enumerate(LETTER_FORMS):
      out[f"letter/{j}"] = THINK + f.format(k=k)
    text = _choice_text(prompt, k)
    if text:
      out["letter/with_text"] = THINK + f"Answer: {k}) {text}"
  elif verifier in ("stem", "mcq"):
    out["short/boxed"] = THINK + f"The final answer is $\\boxed{{{answer}}}$."
    out["short/answer_line"] = THINK + f"**Answer:** {answer}"
  elif verifier == "reasoning_gym":
    for j, w in enumerate(ANSWER_TAG_WRAPPERS):
      out[f"tag/{j}"] = THINK + w.format(x=answer)
  return out


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
