"""The multiple-choice and short-answer verifier's domain (`rewards.mcq`, stem and mcq): a boxed
answer; a choice key written as models write a letter, with its option's text where the prompt
lists it."""

from __future__ import annotations

import re

from prorl_jax.data import honest as honest_lib
from prorl_jax.data.domains import Domain, question
from prorl_jax.data.domains.math import answer_of, wrap  # noqa: F401 - math's boxed answer


def _choice_text(prompt: str, key: str) -> str | None:
  m = re.search(rf"^\(?{key}\)\s*(.+)$", prompt, re.M)
  return m.group(1).strip() if m else None


def honest_forms(answer: str, prompt: str = "") -> dict[str, str]:
  """{style: response} for a choice key (A-J) or a short answer."""
  think = honest_lib.THINK
  if not re.fullmatch(r"[A-J]", answer.strip()):
    return {
      "short/boxed": think + f"The final answer is $\\boxed{{{answer}}}$.",
      "short/answer_line": think + f"**Answer:** {answer}",
    }
  k = answer.strip()
  out = {f"letter/{j}": think + f.format(k=k) for j, f in enumerate(honest_lib.LETTER_FORMS)}
  text = _choice_text(prompt, k)
  if text:
    out["letter/with_text"] = think + f"Answer: {k}) {text}"
  return out


def honest(row: dict) -> dict[str, str]:
  ref = answer_of(row)
  return {} if ref is None else honest_forms(ref, question(row))


DOMAIN = Domain(wrap=wrap, answer_of=answer_of, honest=honest)
