"""The RL loop's state between steps, apart from the model's: what a checkpoint stores beside the
TrainState (as JSON: `loop_json`, read back by `resume_loop`), and all a resumed run needs to
continue exactly."""

from __future__ import annotations

import copy
import dataclasses

from prorl_jax.algo import dynamic_sampling
from prorl_jax.records import Prefetch

# checkpoints written before these fields had their present names
_OLD_NAMES = {"lp": "length_penalty", "pass@1_start": "pass1_start"}


@dataclasses.dataclass
class LoopState:
  """The loop's state between steps (see the module docstring); `to_json`/`from_json` are what a
  checkpoint stores, reading the old names of earlier checkpoints too."""

  step: int = 0  # RL steps done
  version: int = 0  # the newest published policy version
  length_penalty: dict = dataclasses.field(default_factory=dict)  # LengthPenaltySchedule state
  resets: list = dataclasses.field(default_factory=list)  # [{step, why}] reference resets
  kl_history: list = dataclasses.field(default_factory=list)  # KL to the reference, last 50 steps
  val_history: list = dataclasses.field(default_factory=list)  # pass@1 since the last stall reset
  pass1_start: float | None = None  # pass@1 of the validation before the first step
  prefetch: Prefetch | None = None  # the pipelined next step's requests (rollout.pipeline)
  keep_rate: float = 0.5  # dynamic sampling's keep rate in the last step: sizes the prefetch
  data: dict = dataclasses.field(default_factory=dict)  # the training source's cursor
  buffer: list = dataclasses.field(default_factory=list)  # dynamic sampling's carry-over groups
  pending_tail: bool = False  # step `step` trained, its validation and reset not yet done (stop)

  def to_json(self) -> dict:
    """A deep copy as plain JSON (an asynchronous save may write it while the loop goes on)."""
    out = {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)}
    return dict(out, prefetch=self.prefetch and self.prefetch.to_json())

  @classmethod
  def from_json(cls, d: dict) -> LoopState:
    d = {_OLD_NAMES.get(k, k): v for k, v in d.items()}
    fields = {f.name for f in dataclasses.fields(cls)}
    d = {k: v for k, v in d.items() if k in fields}
    if d.get("prefetch") is not None:
      d["prefetch"] = Prefetch.from_json(d["prefetch"])
    return cls(**d)


def loop_json(loop: LoopState, source, buffer) -> dict:
  """The loop state with the data cursor and carry-over buffer, as a checkpoint stores it."""
  return dataclasses.replace(loop, data=source.state(), buffer=buffer.state()).to_json()


def resume_loop(d: dict, source, pins, step: int) -> tuple[LoopState, dynamic_sampling.GroupBuffer]:
  """The loop state of checkpoint `step`; `source` is moved to its cursor, and the weights of its
  prefetch are pinned on the exchange (`versions.Pins`: a restored checkpoint counts as saved), so
  the resumed run samples that prefetch again with the weights it was sampled with."""
  loop = LoopState.from_json(d)
  source.load_state(loop.data)
  pins.saved(step, loop)
  return loop, dynamic_sampling.GroupBuffer.from_state(loop.buffer)


def reset_reason(algo, step: int, kl_history: list, val_history: list) -> str | None:
  """Why the reference policy is reset after `step`, or None: the schedule
  (`algo.ref_reset_every`), a KL spike, or `algo.ref_reset_stall_evals` validations without a new
  best. After a stall reset the caller keeps only the newest validation in the history. `algo`
  is the run's `plan.ResetPlan`."""
  if algo.ref_reset_every and step % algo.ref_reset_every == 0:
    return "schedule"
  if algo.ref_reset_kl_spike and kl_history and kl_history[-1] > algo.ref_reset_kl_spike:
    return "kl_spike"
  n = algo.ref_reset_stall_evals
  if n and len(val_history) > n and max(val_history[-n:]) <= max(val_history[:-n]):
    return "validation_stall"
  return None
