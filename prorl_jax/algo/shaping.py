"""Reward shaping and the dynamic-sampling filter, host-side numpy.

Shaping acts on scalar scores per response; dynamic sampling keeps prompt groups by their *raw*
(unshaped) scores (`informative_groups`). The length-penalty schedule keeps its state in a small
dict so checkpoints hold it and a resumed run continues exactly.
"""

from __future__ import annotations

import dataclasses

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
