"""Run metrics: JSONL (always), TensorBoard and W&B (optional), and a one-line progress bar."""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time

from prorl_jax.trainer.hacks import HackMonitor

log = logging.getLogger(__name__)


def _plain(v):
  try:
    f = float(v)
  except (TypeError, ValueError):
    return v
  return f if math.isfinite(f) else str(f)


# what a step logs after its training line (validation, reference reset): redone on resume
TAIL_EVENTS = ("validation", "reference_reset")
SESSIONS = "sessions.jsonl"  # in run_dir: one line per start of the run, one per clean end
CLOCK = "time/clock"  # the wall-clock time a metrics row was written (Unix seconds)


def wall_seconds_total(run_dir: str, now: float | None = None) -> float:
  """Seconds the run has run over all its sessions: each session from its start to its clean
  end, or (killed) to the last metrics row it wrote; the current session until `now`."""
  try:
    marks = read_jsonl(os.path.join(run_dir, SESSIONS))
  except (OSError, ValueError):
    return 0.0
  try:
    clocks = [r[CLOCK] for r in read_jsonl(os.path.join(run_dir, "metrics.jsonl")) if CLOCK in r]
  except (OSError, ValueError):
    clocks = []
  starts = [m["start"] for m in marks if "start" in m]
  ends = [m["end"] for m in marks if "end" in m]
  total = 0.0
  for i, t0 in enumerate(starts):
    t1 = starts[i + 1] if i + 1 < len(starts) else float("inf")
    inside = [t for t in ends + clocks if t0 <= t < t1]
    if i + 1 == len(starts) and now is not None:
      inside.append(now)
    total += max(inside, default=t0) - t0
  return total


class MetricWriter:
  """Writes each step's metrics to RUN_DIR/metrics.jsonl (and TensorBoard, W&B when asked), and
  says progress lines on the console."""

  def __init__(
    self,
    run_dir: str,
    tensorboard: bool = False,
    wandb_project: str = "",
    total_steps: int = 0,
    hparams: dict | None = None,  # the run's config as plain JSON, for W&B
  ):
    os.makedirs(run_dir, exist_ok=True)
    self.run_dir = run_dir
    self.path = os.path.join(run_dir, "metrics.jsonl")
    self.total = total_steps
    self.t0 = time.time()
    self.first_step_done: tuple[int, float] | None = None  # (step, time): the ETA skips compiling
    self.tb = self.wandb = None
    self.hacks = HackMonitor()
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
      import wandb  # optional dependency (pip install -e .[wandb])

      self.wandb = wandb.init(project=wandb_project, dir=run_dir, config=hparams, resume="allow")

  def start_session(self, step: int, resumed: bool, started: float):
    """Marks this start of the run (at Unix time `started`) in RUN_DIR/sessions.jsonl: resumes
    show on the dashboard, and `wall_seconds_total` adds the sessions up."""
    with open(os.path.join(self.run_dir, SESSIONS), "a") as f:
      f.write(json.dumps({"start": started, "step": step, "resumed": resumed}) + "\n")

  def end_session(self):
    with open(os.path.join(self.run_dir, SESSIONS), "a") as f:
      f.write(json.dumps({"end": time.time()}) + "\n")

  def truncate_after(self, step: int, tail: bool = False):
    """On resume: drop lines logged after the checkpoint we resumed from (they get redone), and
    its step's final line (written again at the end); `tail`: its step's validation and reset
    lines too (a checkpoint saved before them)."""
    if not os.path.isfile(self.path):
      return

    def kept(row: dict) -> bool:  # a run's final row is written again when it finishes
      s, event = row.get("step", 0), str(row.get("event", ""))
      redone = event == "final" or (tail and event.startswith(TAIL_EVENTS))
      return s < step or (s == step and not redone)

    with open(self.path) as f:
      keep = [line for line in f if line.strip() and kept(json.loads(line))]
    with open(self.path, "w") as f:
      f.writelines(keep)

  def validation(self, step: int) -> dict:
    """The in-loop validation logged at `step` (without the val/ prefix), {} if none."""
    rows = read_jsonl(self.path) if os.path.isfile(self.path) else []
    for row in rows:
      if row.get("step") == step and row.get("event") == "validation":
        return {k[4:]: v for k, v in row.items() if k.startswith("val/")}
    return {}

  def write(self, step: int, metrics: dict, event: str | None = None):
    """Appends one row (`step`, the metrics, a wall-clock stamp, `event` when it is one) to
    metrics.jsonl and the other sinks."""
    row = {"step": step, **{k: _plain(v) for k, v in sorted(metrics.items())}}
    row[CLOCK] = round(time.time(), 3)
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
    if not event:
      for line in self.hacks.observe(step, metrics):
        log.warning(line)

  def progress(self, step: int, start_step: int, msg: str):
    """A progress bar redrawn in place on a terminal; one line per step elsewhere (logs)."""
    now = time.time()
    if self.first_step_done is None:  # the first step of a session compiles: not in the rate
      self.first_step_done = (step, now)
      rate = now - self.t0
    else:
      rate = (now - self.first_step_done[1]) / max(step - self.first_step_done[0], 1)
    eta = rate * max(self.total - step, 0)
    if not sys.stdout.isatty():
      stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
      sys.stdout.write(
        f"{stamp} step {step}/{self.total} {msg} ({rate:.1f} s/step, eta {_hms(eta)})\n"
      )
      sys.stdout.flush()
      return
    width = 20
    filled = int(width * step / max(self.total, 1))
    sys.stdout.write(
      f"\r[{'#' * filled}{'.' * (width - filled)}] step {step}/{self.total} {msg} eta {_hms(eta)} "
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


def _hms(seconds: float) -> str:
  s = int(seconds)
  return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class NullWriter:
  """What the non-primary processes of a multi-host run write: nothing (process 0 logs)."""

  def start_session(self, step: int, resumed: bool, started: float):
    pass

  def end_session(self):
    pass

  def truncate_after(self, step: int, tail: bool = False):
    pass

  def validation(self, step: int) -> dict:
    return {}

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
