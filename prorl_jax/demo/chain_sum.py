"""The CPU demo's task: running sums of 3-6 one-digit numbers.

Prompt `4+7+2+9=`; a good completion writes the partial sums then the answer:
`11,13,22<answer>22</answer>`. Binary reward (`prorl_jax.rewards.chain_sum`): the integer inside
the last <answer> tag equals the sum.
"""

from __future__ import annotations

import numpy as np

from prorl_jax.model.tokenizer import prompt_ids
from prorl_jax.records import PromptItem


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


class ChainSumSource:
  """Procedural chain-sum prompts; item k comes from RandomState(seed + k)."""

  verifiers = frozenset({"chain_sum"})

  def __init__(self, tokenizer, seed: int = 0, exclude: set[str] | None = None):
    self.tok, self.seed, self.exclude = tokenizer, seed, exclude or set()
    self.cursor = {"index": 0}

  def item(self, k: int) -> PromptItem:
    """Item `k` of this source (the same every time: from RandomState(seed + k))."""
    it = make_item(np.random.RandomState(self.seed + k))
    return PromptItem(
      prompt_ids=prompt_ids(self.tok, it["prompt"]),
      data_source="chain_sum",
      reference=it["answer"],
      uid=f"chain_sum:{self.seed}:{k}",
      prompt=it["prompt"],
      solution=it["solution"],
    )

  def next(self) -> PromptItem:
    while True:
      it = self.item(self.cursor["index"])
      self.cursor["index"] += 1
      if it.prompt not in self.exclude:
        return it

  def state(self) -> dict:
    return dict(self.cursor)

  def load_state(self, state: dict):
    self.cursor = dict(state)


HELDOUT_SEED = 10_000_000


def chain_sum_heldout(tokenizer, n: int, seed: int = HELDOUT_SEED) -> list[PromptItem]:
  src = ChainSumSource(tokenizer, seed=seed)
  return [src.next() for _ in range(n)]
