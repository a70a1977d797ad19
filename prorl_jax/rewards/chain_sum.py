"""The CPU demo's verifier: the integer inside the last `<answer>` tag of the final answer
(`common.read`) equals the running sum.
The task itself (prompts and reference solutions) is `prorl_jax.demo.chain_sum`."""

from __future__ import annotations

import re

from prorl_jax.rewards.common import Score, read, same_token

_ANSWER = re.compile(r"<answer>\s*(-?\d+)\s*</answer>")


def score(response: str, reference, *, prompt_text: str | None = None, **_) -> Score:
  said = read(response, prompt_text)
  if said.answer is None:
    return Score(0.0, said.why)
  found = _ANSWER.findall(said.answer)
  if not found:
    return Score(0.0, "no <answer> tag")
  ok = same_token(found[-1], str(reference).strip())
  return Score(1.0 if ok else 0.0, "correct" if ok else f"wrong: {found[-1]} != {reference}")
