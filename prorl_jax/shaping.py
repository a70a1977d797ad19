"""Reward shaping and dynamic sampling, host-side numpy.

Shaping acts on scalar scores per response; dynamic sampling filters prompt groups on the *raw*
(unshaped) scores. The length-penalty schedule and the carry-over buffer keep their state in
small dicts so checkpoints hold them and a resumed run continues exactly.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable

import numpy as np


def truncation_penalty(scores, truncated, coef: float = 0.1):
  """s ← coef·s for responses cut at the length limit (finish reason `length`); 1.0 = off."""
  scores = np.asarray(scores, np.float64)
  return np.where(np.asarray(truncated, bool), coef * scores, scores)


def cosine_length_reward(lengths, max_len: int, r_min: float = 0.5, r_max: float = 1.0):
  """r_min + (r_max − r_min)·½(1 + cos(π·L/L_max)): r_max at L=0, r_min at L=L_max."""
  frac = np.clip(np.asarray(lengths, np.float64) / max_len, 0.0, 1.0)
  return r_min + (r_max - r_min) * 0.5 * (1.0 + np.cos(np.pi * frac))


def length_penalty(
  scores, correct, lengths, max_len: int, *, r_min: float = 0.5, r_max: float = 1.0, apply=None
):
  """ProRL v2 cosine length penalty: correct responses (where `apply`) get the cosine reward."""
  scores = np.asarray(scores, np.float64)
  sel = np.asarray(correct, bool)
  if apply is not None:
    sel &= np.asarray(apply, bool)
  return np.where(sel, cosine_length_reward(lengths, max_len, r_min, r_max), scores)


def dapo_overlong(scores, lengths, max_len: int, buffer: int, factor: float = 1.0):
  """DAPO soft overlong punishment: s + factor·R_len, R_len 0 → linear → −1 past L_max."""
  lengths = np.asarray(lengths, np.float64)
  start = max_len - buffer
  r_len = np.where(lengths <= start, 0.0, (start - lengths) / buffer)
  r_len = np.where(lengths > max_len, -1.0, r_len)
  return np.asarray(scores, np.float64) + factor * r_len


@dataclasses.dataclass(frozen=True)
class LengthPenaltySchedule:
  """Cycles of `on_steps` RL steps with the penalty on, then `off_steps` off; mode off/always."""

  mode: str = "scheduled"
  on_steps: int = 100
  off_steps: int = 500

  def init_state(self) -> dict:
    return {"phase": "off" if self.mode == "off" else "on", "steps_in_phase": 0, "cycles": 0}

  def is_on(self, state: dict) -> bool:
    return state["phase"] == "on"

  def advance(self, state: dict) -> tuple[dict, str | None]:
    """State after one more RL step, and the event ('on'/'off') when the phase flips."""
    if self.mode != "scheduled":
      return dict(state, steps_in_phase=state["steps_in_phase"] + 1), None
    s = dict(state, steps_in_phase=state["steps_in_phase"] + 1)
    limit = self.on_steps if s["phase"] == "on" else self.off_steps
    if s["steps_in_phase"] < limit:
      return s, None
    new = "off" if s["phase"] == "on" and self.off_steps > 0 else "on"
    cycles = s["cycles"] + (1 if new == "on" else 0)
    if new == s["phase"]:  # off_steps == 0: always on
      return dict(s, steps_in_phase=0, cycles=cycles), None
    return {"phase": new, "steps_in_phase": 0, "cycles": cycles}, new


# ----------------------------------------------------------------------------- dynamic sampling


def informative_groups(raw_scores_PxN) -> np.ndarray:
  """True for groups whose raw scores are not all equal (std > 0): they carry a signal."""
  s = np.asarray(raw_scores_PxN, np.float64)
  return s.std(axis=1) > 0


@dataclasses.dataclass
class FillStats:
  rounds: int = 0
  groups_generated: int = 0
  groups_kept: int = 0
  from_carry_over: int = 0
  exhausted: bool = False
  short: bool = False  # fewer groups than asked: trained on what there was

  @property
  def keep_rate(self) -> float:
    return self.groups_kept / max(self.groups_generated, 1)


class GroupBuffer:
  """Informative prompt groups waiting to be trained on; leftovers carry over to the next step.

  A group is any dict with a `raw_scores` entry of shape [N]. `state()`/`from_state()` round-trip
  through checkpoints.
  """

  def __init__(self, groups: Iterable[dict] | None = None):
    self.groups: list[dict] = list(groups or [])

  def __len__(self):
    return len(self.groups)

  def add(self, groups: Iterable[dict], filter_uninformative: bool = True) -> int:
    groups = list(groups)
    if filter_uninformative and groups:
      keep = informative_groups(np.stack([np.asarray(g["raw_scores"]) for g in groups]))
      groups = [g for g, k in zip(groups, keep) if k]
    self.groups.extend(groups)
    return len(groups)

  def evict(self, expired: Callable[[dict], bool]) -> int:
    """Drops the groups for which `expired(group)` is true; returns how many."""
    keep = [g for g in self.groups if not expired(g)]
    n, self.groups = len(self.groups) - len(keep), keep
    return n

  def take(self, k: int) -> list[dict]:
    out, self.groups = self.groups[:k], self.groups[k:]
    return out

  def state(self) -> list[dict]:
    return [
      {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in g.items()}
      for g in self.groups
    ]

  @classmethod
  def from_state(cls, state: list[dict]) -> GroupBuffer:
    return cls(
      [{k: (np.asarray(v) if isinstance(v, list) else v) for k, v in g.items()} for g in state]
    )


def fill(
  buffer: GroupBuffer,
  generate: Callable[[], list[dict] | None],
  needed: int,
  *,
  max_rounds: int = 10,
  dynamic_sampling: bool = True,
) -> tuple[list[dict], FillStats]:
  """Takes `needed` groups, generating rounds until the buffer holds enough.

  `generate()` returns one round of scored groups, or None when the prompt source is exhausted.
  Stops after `max_rounds` rounds (0 = no limit). Never raises for lack of prompts: returns what
  there is and marks the stats `short`.
  """
  stats = FillStats(from_carry_over=min(len(buffer), needed))
  while len(buffer) < needed and (max_rounds == 0 or stats.rounds < max_rounds):
    groups = generate()
    if groups is None:
      stats.exhausted = True
      break
    stats.rounds += 1
    stats.groups_generated += len(groups)
    stats.groups_kept += buffer.add(groups, filter_uninformative=dynamic_sampling)
  out = buffer.take(needed)
  stats.short = len(out) < needed
  return out, stats
