"""Rollout workers started on this machine by the trainer (or the eval CLI)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

log = logging.getLogger(__name__)


class LocalWorkers:
  """Worker processes on this machine, restarted when they die, stopped on exit."""

  def __init__(self, url: str, count: int, engine: str, log_dir: str,
               unsandboxed_code: bool = False):
    self.url, self.count, self.engine, self.log_dir = url, count, engine, log_dir
    self.unsandboxed_code = unsandboxed_code
    self.procs: list[subprocess.Popen] = []
    self.restarts = 0
    os.makedirs(log_dir, exist_ok=True)
    for i in range(count):
      self.procs.append(self._start(i))

  def _start(self, i):
    env = dict(os.environ, XLA_FLAGS="", PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
         os.environ.get("PYTHONPATH", "")]))
    out = open(os.path.join(self.log_dir, f"worker{i}.log"), "a")
    return subprocess.Popen(
        [sys.executable, "-m", "prorl_jax.rollout.worker", f"--exchange={self.url}",
         f"--engine={self.engine}", f"--worker_id=local{i}", "--poll_seconds=0.02",
         "--exit_with_parent",
         f"--cache_dir={os.path.join(self.log_dir, f'cache{i}')}",
         *(["--unsandboxed_code"] if self.unsandboxed_code else [])],
        stdout=out, stderr=subprocess.STDOUT, env=env)

  def check(self) -> str:
    for i, p in enumerate(self.procs):
      if p.poll() is not None:
        log.warning("local worker %d exited with %s; restarting it", i, p.returncode)
        self.procs[i] = self._start(i)
        self.restarts += 1
    return f"(local workers alive: {sum(p.poll() is None for p in self.procs)}/{self.count})"

  def stop(self):
    for p in self.procs:
      if p.poll() is None:
        p.terminate()
    for p in self.procs:
      try:
        p.wait(timeout=20)
      except subprocess.TimeoutExpired:
        p.kill()
