"""The CPU demo's verifier: the integer inside the last `<answer>` tag equals the running sum.
The task itself (prompts and reference solutions) is `prorl_jax.demo.chain_sum`."""

from __future__ import annotations

import re

from prorl_jax.rewards.common import Score, same_token

_ANSWER = re.compile(r"<answer>\s*(-?\d+)\s*</answer>")


def score(response: str, reference, **_) -> Score:
  found = _ANSWER.findall(response)
  if not found:
    return Score(0.0, "no <answer> tag")
  ok = same_token(found[-1], str(reference).strip())
  return Score(1.0 if ok else 0.0, "correct" if ok else f"wrong: {found[-1]} != {reference}")
