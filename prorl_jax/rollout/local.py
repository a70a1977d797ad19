"""Rollout workers started on this machine by the trainer (or the eval CLI).

Each worker runs with `python` (for vLLM: the interpreter of the vLLM environment, which has its
own torch and transformers) and logs to `<log_dir>/worker<i>.log`. A worker that exits is
restarted; one that exits `max_failures` times in a row without serving a request stops the run
with `WorkerFailure`: one line with its exit status and the tail of its log.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable

from prorl_jax.config import engines as specs

log = logging.getLogger(__name__)

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The vLLM environment `make venv-vllm` builds (the GPU or the CPU build of vLLM).
VLLM_VENV_PYTHON = os.path.join(PROJECT_ROOT, ".venv-vllm", "bin", "python")
SERVED_MARK = " served "  # what the worker logs after each committed request


class WorkerFailure(RuntimeError):
  """Local workers cannot run (an interpreter without the engine, a crash loop)."""


def worker_python(engine: str, configured: str = "") -> str:
  """The interpreter for local workers: `configured`, else the vLLM environment's for vLLM,
  else this one."""
  if configured:
    return configured
  return VLLM_VENV_PYTHON if specs.spec(engine).own_python else sys.executable


def check_worker_python(python: str, engine: str, timeout_s: float = 600.0):
  """Raises WorkerFailure (one line, with the fix) unless `python` can import the engine."""
  module, fix = specs.spec(engine).import_name, specs.spec(engine).fix
  if not os.path.isfile(python) or not os.access(python, os.X_OK):
    raise WorkerFailure(f"rollout.worker_python={python!r} is not an executable Python; {fix}")
  if not specs.spec(engine).own_python and os.path.realpath(python) == os.path.realpath(
    sys.executable
  ):
    return  # the trainer's own interpreter, which runs jax already
  try:
    res = subprocess.run(
      [python, "-c", f"import {module}"],
      capture_output=True,
      text=True,
      timeout=timeout_s,
      env=dict(os.environ, PYTHONPATH=PROJECT_ROOT),
    )
  except subprocess.TimeoutExpired:
    raise WorkerFailure(f"{python} took over {timeout_s:.0f}s to import {module}") from None
  if res.returncode:
    why = (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1]
    raise WorkerFailure(
      f"local workers with engine={engine} need {module}, but {python} "
      f"cannot import it ({why}); {fix}"
    )


def _tail(path: str, start: int, lines: int = 6) -> str:
  try:
    with open(path, "rb") as f:
      f.seek(start)
      text = f.read().decode("utf-8", "replace")
  except OSError:
    return ""
  return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


class LocalWorkers:
  """Worker processes on this machine, restarted when they die, stopped on exit."""

  def __init__(
    self,
    url: str,
    count: int,
    engine: str,
    log_dir: str,
    unsandboxed_code: bool = False,
    python: str | None = None,
    max_failures: int = 3,
    engine_options: dict | None = None,
    inflight_updates: bool = False,
    verifier_processes: int = 1,
    sandbox_limits: dict | None = None,
    on_death: Callable[[str], object] | None = None,
    envs: list[dict[str, str]] | None = None,
  ):
    """`verifier_processes`: each worker's verifier pool. `sandbox_limits`: {memory_bytes,
    pids}, ceilings on the code sandboxes of all these workers together (one cgroup for the
    run where the host allows it). `on_death(worker_id)` runs when a worker is found dead,
    before its restart (`RequestQueue.release`: its leases are dropped rather than waited out).
    `envs[i]`: worker i's extra environment (the GPUs `rollout.layout` pins it to)."""
    self.url, self.count, self.engine, self.log_dir = url, count, engine, log_dir
    self.sandbox_limits = sandbox_limits or {}
    self.unsandboxed_code = unsandboxed_code
    self.engine_options = engine_options or {}
    self.inflight_updates = inflight_updates
    self.verifier_processes = verifier_processes
    self.python = python or worker_python(engine)
    self.max_failures = max_failures
    self.on_death = on_death
    self.envs = envs or [{} for _ in range(count)]
    self.procs: list[subprocess.Popen] = []
    self.log_start: list[int] = []  # log offset where each worker's current life begins
    self.failures = [0] * count  # exits in a row without a served request
    self.restarts = 0
    os.makedirs(log_dir, exist_ok=True)
    for i in range(count):
      self.procs.append(self._start(i))

  def _log(self, i: int) -> str:
    return os.path.join(self.log_dir, f"worker{i}.log")

  def _start(self, i):
    env = dict(
      os.environ,
      XLA_FLAGS="",
      PYTHONPATH=os.pathsep.join([PROJECT_ROOT, os.environ.get("PYTHONPATH", "")]),
      PRORL_SANDBOX_GROUP=f"prorl-run-{os.getpid()}",  # one cgroup for all these workers
      PRORL_SANDBOX_SHARERS=str(self.count),  # without one: the budget split among them
      **self.envs[i],
    )
    out = open(self._log(i), "a")
    start = out.tell()
    if i < len(self.log_start):
      self.log_start[i] = start
    else:
      self.log_start.append(start)
    try:
      return subprocess.Popen(
        [
          self.python,
          "-m",
          "prorl_jax.cli.worker",
          f"--exchange={self.url}",
          f"--engine={self.engine}",
          f"--worker_id=local{i}",
          "--poll_seconds=0.02",
          "--exit_with_parent",
          f"--cache_dir={os.path.join(self.log_dir, f'cache{i}')}",
          *(["--unsandboxed_code"] if self.unsandboxed_code else []),
          *(["--inflight_updates"] if self.inflight_updates else []),
          f"--verifier_processes={self.verifier_processes}",
          *(
            [f"--sandbox_memory_bytes={self.sandbox_limits['memory_bytes']}"]
            if "memory_bytes" in self.sandbox_limits
            else []
          ),
          *(
            [f"--sandbox_pids={self.sandbox_limits['pids']}"]
            if "pids" in self.sandbox_limits
            else []
          ),
          *([f"--engine_options={json.dumps(self.engine_options)}"] if self.engine_options else []),
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
      )
    except OSError as e:
      raise WorkerFailure(
        f"cannot start a local worker with {self.python}: {e}; set rollout.worker_python"
      ) from None
    finally:
      out.close()

  def check(self) -> str:
    """Restarts dead workers; raises WorkerFailure on a crash loop. Returns a status line."""
    for i, p in enumerate(self.procs):
      if p.poll() is None:
        continue
      if self.on_death is not None:
        self.on_death(f"local{i}")
      served = SERVED_MARK in _tail(self._log(i), self.log_start[i], lines=10**9)
      self.failures[i] = 0 if served else self.failures[i] + 1
      if self.failures[i] >= self.max_failures:
        raise WorkerFailure(
          f"local worker {i} exited {self.failures[i]} times in a row without serving a "
          f"request (last exit status {p.returncode}); {self._log(i)} ends: "
          f"{_tail(self._log(i), self.log_start[i])}"
        )
      log.warning("local worker %d exited with %s; restarting it", i, p.returncode)
      time.sleep(min(2.0 ** self.failures[i] / 4, 2.0))  # no busy restart loop
      self.procs[i] = self._start(i)
      self.restarts += 1
    return f"(local workers alive: {sum(p.poll() is None for p in self.procs)}/{self.count})"

  def stop(self):
    """Terminates every worker, then kills those that have not exited after 20 seconds."""
    for p in self.procs:
      if p.poll() is None:
        p.terminate()
    for p in self.procs:
      try:
        p.wait(timeout=20)
      except subprocess.TimeoutExpired:
        p.kill()
