"""The CPU demo's task: running sums of 3-6 one-digit numbers.

Prompt `4+7+2+9=`; a good completion writes the partial sums then the answer:
`11,13,22<answer>22</answer>`. Binary reward (`prorl_jax.rewards.chain_sum`): the integer inside
the last <answer> tag equals the sum.
"""

from __future__ import annotations


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
