"""Run metrics: JSONL (always), TensorBoard and W&B (optional), and a one-line progress bar."""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time

log = logging.getLogger(__name__)


def _plain(v):
  try:
    f = float(v)
  except (TypeError, ValueError):
    return v
  return f if math.isfinite(f) else str(f)


# what a step logs after its training line (validation, reference reset): redone on resume
TAIL_EVENTS = ("validation", "reference_reset")


class MetricWriter:
  def __init__(
    self,
    run_dir: str,
    tensorboard: bool = False,
    wandb_project: str = "",
    total_steps: int = 0,
    config: dict | None = None,
  ):
    os.makedirs(run_dir, exist_ok=True)
    self.path = os.path.join(run_dir, "metrics.jsonl")
    self.total = total_steps
    self.t0 = time.time()
    self.tb = self.wandb = None
    if tensorboard:
      try:
        from tensorboardX import SummaryWriter  # optional dependency

        self.tb = SummaryWriter(os.path.join(run_dir, "tb"))
      except ImportError:
        log.warning(
          "metrics.tensorboard=True but tensorboardX is not installed; "
          "pip install tensorboardX (JSONL metrics are written regardless)"
        )
    if wandb_project:
      import wandb

      self.wandb = wandb.init(project=wandb_project, dir=run_dir, config=config, resume="allow")

  def truncate_after(self, step: int, tail: bool = False):
    """On resume: drop lines logged after the checkpoint we resumed from (they get redone);
    `tail`: its step's validation and reset lines too (a checkpoint saved before them)."""
    if not os.path.isfile(self.path):
      return

    def kept(row: dict) -> bool:
      s, event = row.get("step", 0), str(row.get("event", ""))
      return s < step or (s == step and not (tail and event.startswith(TAIL_EVENTS)))

    with open(self.path) as f:
      keep = [line for line in f if line.strip() and kept(json.loads(line))]
    with open(self.path, "w") as f:
      f.writelines(keep)

  def write(self, step: int, metrics: dict, event: str | None = None):
    row = {"step": step, **{k: _plain(v) for k, v in sorted(metrics.items())}}
    if event:
      row["event"] = event
    with open(self.path, "a") as f:
      f.write(json.dumps(row) + "\n")
    nums = {k: v for k, v in row.items() if isinstance(v, float)}
    if self.tb:
      for k, v in nums.items():
        self.tb.add_scalar(k, v, step)
    if self.wandb:
      self.wandb.log(nums, step=step)

  def progress(self, step: int, start_step: int, msg: str):
    """A progress bar redrawn in place on a terminal; one line per step elsewhere (logs)."""
    done = step - start_step
    rate = (time.time() - self.t0) / max(done, 1)
    eta = rate * max(self.total - step, 0)
    if not sys.stdout.isatty():
      sys.stdout.write(f"step {step}/{self.total} {msg} ({rate:.1f} s/step, eta {eta:.0f}s)\n")
      sys.stdout.flush()
      return
    width = 20
    filled = int(width * step / max(self.total, 1))
    sys.stdout.write(
      f"\r[{'#' * filled}{'.' * (width - filled)}] step {step}/{self.total} {msg} eta {eta:5.0f}s "
    )
    sys.stdout.flush()

  def say(self, line: str):
    """A line for people (validation results): on a fresh line even after a progress bar."""
    sys.stdout.write(("\n" if sys.stdout.isatty() else "") + line + "\n")
    sys.stdout.flush()

  def close(self):
    if self.tb:
      self.tb.close()
    if self.wandb:
      self.wandb.finish()


class NullWriter:
  """What the non-primary processes of a multi-host run write: nothing (process 0 logs)."""

  def truncate_after(self, step: int, tail: bool = False):
    pass

  def write(self, step: int, metrics: dict, event: str | None = None):
    pass

  def progress(self, step: int, start_step: int, msg: str):
    pass

  def say(self, line: str):
    pass

  def close(self):
    pass


def read_jsonl(path: str) -> list[dict]:
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]
