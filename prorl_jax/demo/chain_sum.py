"""The CPU demo's task: running sums of 3-6 one-digit numbers.

Prompt `4+7+2+9=`; a good completion writes the partial sums then the answer:
`11,13,22<answer>22</answer>`. Binary reward: the integer inside the last <answer> tag equals
the sum.
"""

from __future__ import annotations

import re

from prorl_jax.rewards import Score
from prorl_jax.rewards.common import same_token

_ANSWER = re.compile(r"<answer>\s*(-?\d+)\s*</answer>")


def make_item(rng, min_terms: int = 3, max_terms: int = 6) -> dict:
  """One item: {prompt, answer, solution} from a numpy RandomState."""
  nums = [int(x) for x in rng.randint(1, 10, size=rng.randint(min_terms, max_terms + 1))]
  partial, acc = [], nums[0]
  for x in nums[1:]:
    acc += x
    partial.append(str(acc))
  return {
    "prompt": "+".join(map(str, nums)) + "=",
    "answer": str(acc),
    "solution": ",".join(partial) + f"<answer>{acc}</answer>",
  }


def score(response: str, reference, **_) -> Score:
  found = _ANSWER.findall(response)
  if not found:
    return Score(0.0, "no <answer> tag")
  ok = same_token(found[-1], str(reference).strip())
  return Score(1.0 if ok else 0.0, "correct" if ok else f"wrong: {found[-1]} != {reference}")


def format_score(response: str, reference=None, **_) -> Score:
  """Placeholder scorer for sources without a verifier: 1 if an answer tag is present."""
  return Score(1.0 if _ANSWER.search(response) else 0.0, "format")
