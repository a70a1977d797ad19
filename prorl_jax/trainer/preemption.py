"""Stopping on preemption: SIGTERM or SIGINT (or a cluster's preemption notice file) ask the run
to stop, and the trainer saves a checkpoint it can resume from exactly, then exits with
`REQUEUE_EXIT`.

The trainer polls `Watch` while it waits (for rollouts, for a validation) and between the phases
of a step. A wait asked to stop is abandoned (`Preempted`): while a step still collects its
rollouts, the checkpoint is the state before the step (the step is redone); during the step's
validation, it is the trained step with its validation still to do (`LoopState.pending_tail`:
the resumed run validates it first). A request that arrives while a step updates or publishes
lets that phase finish. A second SIGINT stops at once (KeyboardInterrupt).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

log = logging.getLogger(__name__)

REQUEUE_EXIT = 75  # EX_TEMPFAIL (sysexits.h): stopped to be started again; resumes by itself
PREEMPTED = "__preempted__"  # what the primary broadcasts when its wait was abandoned


_EARLY: dict = {}  # a stop asked before the Watch exists: {"why": signal name, "since": time}


def _early_handler(signum, frame):
  if _EARLY and signum == signal.SIGINT:
    raise KeyboardInterrupt
  _EARLY.setdefault("why", signal.Signals(signum).name)
  _EARLY.setdefault("since", time.time())


def install_early():
  """Heeds SIGTERM/SIGINT from a process's first line: the request is kept for the `Watch` that
  the trainer makes once its flags are parsed (the imports before it take a second or more)."""
  if threading.current_thread() is threading.main_thread():
    for sig in (signal.SIGTERM, signal.SIGINT):
      signal.signal(sig, _early_handler)


class Preempted(Exception):
  """A wait abandoned because the run was asked to stop."""


class Watch:
  """Whether the run was asked to stop, and since when. `on_signal`: handle SIGTERM and SIGINT
  (main thread only; the previous handlers come back on `close`); `notice_file`: a path whose
  appearance asks the same."""

  def __init__(self, on_signal: bool = True, notice_file: str = "", grace_s: float = 30.0):
    self.notice_file, self.grace_s = notice_file, grace_s
    self.since: float | None = None
    self.why = ""
    self._old = {}
    if on_signal and threading.current_thread() is threading.main_thread():
      for sig in (signal.SIGTERM, signal.SIGINT):
        self._old[sig] = signal.signal(sig, self._handler)
      if _EARLY:  # asked while the process started
        self.ask(_EARLY["why"])
        self.since = _EARLY["since"]

  def _handler(self, signum, frame):
    if self.since is not None and signum == signal.SIGINT:
      raise KeyboardInterrupt  # asked twice: stop now, without a checkpoint
    self.ask(signal.Signals(signum).name)

  def ask(self, why: str):
    if self.since is None:
      self.since, self.why = time.time(), why
      log.warning(
        "%s: stopping at the next safe point and saving a checkpoint (grace %.0f s)",
        why,
        self.grace_s,
      )

  def requested(self) -> bool:
    if self.since is None and self.notice_file and os.path.exists(self.notice_file):
      self.ask(f"preemption notice {self.notice_file}")
    return self.since is not None

  def check(self) -> str:
    """For a wait's idle hook: raises Preempted once a stop was asked."""
    if self.requested():
      raise Preempted(self.why)
    return ""

  def elapsed_s(self) -> float:
    return 0.0 if self.since is None else time.time() - self.since

  def close(self):
    for sig, old in self._old.items():
      signal.signal(sig, old)
    self._old = {}
