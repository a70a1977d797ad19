"""A pool of verifier processes with a hard per-item wall-clock kill.

Processes, not threads: math-verify's own timeouts use signals (main thread only), and a
verifier stuck in C code can only be stopped by killing its process. A killed or dead process is
replaced, and its code sandboxes die with it (bubblewrap's `--die-with-parent`). Per-domain
counts of scored items, timeouts and verifier errors are kept in `stats` and exported as
metrics; every item gets a score or a marked failure (`Score.failed`) with a reason, never a
silent 0 and never nothing.
"""

from __future__ import annotations

import collections
import logging
import multiprocessing as mp
import queue
import threading

from prorl_jax import rewards

log = logging.getLogger(__name__)


def _serve(conn, unsandboxed_code: bool = False):
  """Receives a chunk of jobs, sends one result per job as soon as it is scored."""
  from prorl_jax.rewards import sandbox

  sandbox.allow_unsandboxed(unsandboxed_code)
  while True:
    chunk = conn.recv()
    if chunk is None:
      return
    for domain, response, reference, meta, table in chunk:
      try:
        verifier = rewards.route(domain, table)
      except KeyError as e:
        conn.send(rewards.Score(0.0, str(e), failed=True))
        continue
      conn.send(rewards.safe_score(verifier, response, reference, **meta))


class _Slot:
  def __init__(self, ctx, unsandboxed_code: bool):
    self.ctx, self.unsandboxed_code = ctx, unsandboxed_code
    self.start()

  def start(self):
    self.conn, child = self.ctx.Pipe()
    self.proc = self.ctx.Process(target=_serve, args=(child, self.unsandboxed_code), daemon=True)
    self.proc.start()
    child.close()

  def kill_and_restart(self):
    self.proc.kill()
    self.proc.join(5)
    self.conn.close()
    self.start()

  def send(self, msg) -> bool:
    """Sends to a live verifier, replacing one that died while idle; False if it cannot."""
    for _ in range(2):
      if self.proc.is_alive():
        try:
          self.conn.send(msg)
          return True
        except (OSError, ValueError):
          pass
      self.kill_and_restart()
    return False

  def close(self):
    try:
      self.conn.send(None)
    except (OSError, ValueError):
      pass
    self.proc.join(2)
    if self.proc.is_alive():
      self.proc.kill()


DEFAULT_TIMEOUT_S = 30.0  # hard wall-clock kill of one verification (a code item runs all its
# tests within code.score's own 5 s budget; math-verify's timeouts are 5 s per call)


class VerifierPool:
  def __init__(
    self,
    processes: int = 2,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    routing: dict[str, str] | None = None,
    unsandboxed_code: bool = False,
  ):
    ctx = mp.get_context("spawn")  # never fork a process that holds JAX/threads
    self.slots = [_Slot(ctx, unsandboxed_code) for _ in range(processes)]
    self.timeout_s, self.routing = timeout_s, routing
    self.stats: collections.Counter = collections.Counter()

  def score_many(
    self, jobs: list[tuple[str, str, object, dict]], routing: dict[str, str] | None = None
  ) -> list[rewards.Score]:
    """jobs: (data_source, response, reference, meta) -> one Score each, in order."""
    table = {**(self.routing or {}), **(routing or {})}
    out: list = [None] * len(jobs)
    todo: queue.Queue = queue.Queue()
    for i, job in enumerate(jobs):
      todo.put((i, job))

    chunk_size = max(1, min(64, -(-len(jobs) // len(self.slots))))

    def drain(slot: _Slot):
      while True:
        chunk = []
        while len(chunk) < chunk_size:
          try:
            chunk.append(todo.get_nowait())
          except queue.Empty:
            break
        if not chunk:
          return
        # One message per chunk (IPC per item costs more than a cheap verifier); results come
        # back one by one, each under its own wall-clock limit.
        if not slot.send([(d, r, ref, m, table) for _, (d, r, ref, m) in chunk]):
          for i, (domain, _, _, _) in chunk:
            out[i] = rewards.Score(0.0, "verifier process could not be started", failed=True)
            self.stats[f"{domain}/scored"] += 1
            self.stats[f"{domain}/errors"] += 1
          continue
        for k, (i, (domain, _, _, _)) in enumerate(chunk):
          try:
            ready = slot.conn.poll(self.timeout_s)
          except (OSError, EOFError):
            ready = True  # a dead pipe: recv below says so
          if ready:
            try:
              out[i] = slot.conn.recv()
            except (EOFError, OSError):  # the verifier process died (e.g. killed by the OS)
              out[i] = rewards.Score(0.0, "verifier process died", failed=True)
          else:
            out[i] = rewards.Score(0.0, f"verifier timeout after {self.timeout_s:g}s", failed=True)
            self.stats[f"{domain}/timeouts"] += 1
          self.stats[f"{domain}/scored"] += 1
          if out[i].failed and "timeout" not in out[i].reason:
            self.stats[f"{domain}/errors"] += 1
          if out[i].failed and out[i].reason.startswith(("verifier timeout", "verifier process")):
            slot.kill_and_restart()
            for rest in chunk[k + 1 :]:  # the rest of the chunk goes back to the queue
              todo.put(rest)
            break

    threads = [threading.Thread(target=drain, args=(s,)) for s in self.slots]
    for t in threads:
      t.start()
    for t in threads:
      t.join()
    for i, (domain, _, _, _) in enumerate(jobs):  # a drain thread that crashed left a gap
      if not isinstance(out[i], rewards.Score):
        out[i] = rewards.Score(0.0, "not scored (verifier pool error)", failed=True)
        self.stats[f"{domain}/errors"] += 1
    return out

  def close(self):
    for s in self.slots:
      s.close()
