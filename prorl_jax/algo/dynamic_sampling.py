"""Dynamic sampling's generation rounds and carry-over buffer (DAPO): groups are generated
round after round until enough informative ones are kept; extra informative groups wait in a
buffer for the next step. The buffer's state is a small dict, so checkpoints hold it and a
resumed run continues exactly.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Iterable

import numpy as np

from prorl_jax.algo.shaping import informative_groups
from prorl_jax.records import Group


@dataclasses.dataclass
class FillStats:
  """How one step's batch was filled: generation rounds, groups generated and kept by the
  informative-group filter, groups taken from the carry-over buffer, and whether the step had to
  train on fewer groups than it asked for."""

  rounds: int = 0
  groups_generated: int = 0
  groups_kept: int = 0
  from_carry_over: int = 0
  short: bool = False  # fewer groups than asked: trained on what there was

  @property
  def keep_rate(self) -> float:
    return self.groups_kept / max(self.groups_generated, 1)


class GroupBuffer:
  """Informative prompt groups waiting to be trained on; leftovers carry over to the next step.

  Groups are `records.Group`s; `state()`/`from_state()` round-trip them through a checkpoint's
  JSON.
  """

  def __init__(self, groups: Iterable[Group] | None = None):
    self.groups: list[Group] = list(groups or [])

  def __len__(self):
    return len(self.groups)

  def add(self, groups: Iterable[Group], filter_uninformative: bool = True) -> int:
    groups = list(groups)
    if filter_uninformative and groups:
      keep = informative_groups(np.stack([np.asarray(g.raw_scores) for g in groups]))
      groups = [g for g, k in zip(groups, keep) if k]
    self.groups.extend(groups)
    return len(groups)

  def evict(self, expired: Callable[[Group], bool]) -> int:
    """Drops the groups for which `expired(group)` is true; returns how many."""
    keep = [g for g in self.groups if not expired(g)]
    n, self.groups = len(self.groups) - len(keep), keep
    return n

  def take(self, k: int) -> list[Group]:
    out, self.groups = self.groups[:k], self.groups[k:]
    return out

  def state(self) -> list[dict]:
    return [g.to_json() for g in self.groups]

  @classmethod
  def from_state(cls, state: list[dict]) -> GroupBuffer:
    return cls([Group.from_json(g) for g in state])


def gather_groups(
  buffer: GroupBuffer,
  generate: Callable[[], list[Group] | None],
  needed: int,
  *,
  max_rounds: int = 10,
  dynamic_sampling: bool = True,
) -> tuple[list[Group], FillStats]:
  """Takes `needed` groups, generating rounds until the buffer holds enough.

  `generate()` returns one round of scored groups, or None when the prompt source is exhausted.
  Stops after `max_rounds` rounds (0 = no limit). Never raises for lack of prompts: returns what
  there is and marks the stats `short`.
  """
  stats = FillStats(from_carry_over=min(len(buffer), needed))
  while len(buffer) < needed and (max_rounds == 0 or stats.rounds < max_rounds):
    groups = generate()
    if groups is None:  # the prompt source is exhausted
      break
    stats.rounds += 1
    stats.groups_generated += len(groups)
    stats.groups_kept += buffer.add(groups, filter_uninformative=dynamic_sampling)
  out = buffer.take(needed)
  stats.short = len(out) < needed
  return out, stats


def prefetch_rounds(
  needed: int, carried: int, pending: float, keep_rate: float, max_rounds: int = 0
) -> int:
  """Rounds of `needed` prompts to send ahead for the next step (the pipelined loop), sized so
  that it needs no refill: this step takes `needed` groups from the `carried` ones and the
  `pending` ones its own prefetch is expected to bring; what is left carries over, and the rest
  of the next step's groups must come from the rounds sent now, a share `keep_rate` of each
  round's prompts being informative. At least 1, at most `max_rounds` (0: no limit)."""
  left = max(0.0, carried + pending - needed)
  want = needed - left
  rounds = max(1, math.ceil(want / (needed * max(keep_rate, 0.05)) - 1e-9)) if want > 0 else 1
  return min(rounds, max_rounds) if max_rounds else rounds
