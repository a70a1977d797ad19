"""A pool of verifier processes with a hard per-item wall-clock kill.

Processes, not threads: math-verify's own timeouts use signals (main thread only), and a
verifier stuck in C code can only be stopped by killing its process. A killed or dead process is
replaced, and its code sandboxes die with it (bubblewrap's `--die-with-parent`). A pool process
never runs a third-party checker on model text itself: the verifiers in `rewards.ISOLATED` judge
each response in a throw-away confined child (`rewards/isolate.py`), code runs in the bubblewrap
sandbox; only project code (code's output comparison, chain_sum's regex) reads text here.

Per-domain counts are kept in `stats` and exported as metrics: `scored`, `response_errors` (the
response broke its judgement: 0; a pool process stuck past `timeout_s` on one response is one of
them and is also counted in `timeouts`), `errors` (faults that are not the response's: marked
`failed`), `starved` (judgements cut short by other load — little CPU while wanting it — judged
again after the batch, alone and with ALONE_WALL_FACTOR times the wall clock but the same CPU
limits; one still starved then starved itself, with its own processes: a response error).
Every item gets a score or a marked failure with a reason, never a silent 0 and never nothing.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import multiprocessing as mp
import queue
import threading

from prorl_jax import rewards
from prorl_jax.rewards import detectors, isolate, reading
from prorl_jax.sandbox import confinement

log = logging.getLogger(__name__)


def _judge(name: str, verifier, response: str, reference, meta: dict) -> rewards.Score:
  """The verifier's score with the hack monitor's flags (a detector never costs a score)."""
  s = rewards.safe_score(verifier, response, reference, **meta)
  try:
    found = detectors.flags(name, response, s, meta.get("prompt_text"))
  except Exception:  # noqa: BLE001 - the flags are a report on the score, never part of it
    return s
  return dataclasses.replace(s, flags=found) if found else s


def score_one(domain: str, response: str, reference, meta: dict, table, timeout_s: float):
  """One job in this (pool) process: routed, warmed, judged in a throw-away child when its
  verifier is isolated. Never raises."""
  try:
    name = rewards.verifier_name(domain, table)
  except KeyError as e:
    return rewards.Score(0.0, str(e), failed=True)
  verifier = rewards.route(domain, table)
  if name not in rewards.ISOLATED:
    return _judge(name, verifier, response, reference, meta)
  try:
    rewards.warm(name, reference, meta)
  except Exception as e:  # noqa: BLE001 - the item (not the response) is unusable
    return rewards.Score(0.0, f"item cannot be scored: {type(e).__name__}: {e}", failed=True)
  factor = float(meta.get("wall_factor", 1.0))  # the wall clock only: the CPU limit stays
  got = isolate.run(
    _judge, name, verifier, response, reference, meta, timeout_s=timeout_s * factor, cpu_s=timeout_s
  )
  return rewards.checked(got)


def _serve(conn, unsandboxed_code: bool = False, child_timeout_s: float = 20.0, run_limits=None):
  """Receives a chunk of jobs, sends one result per job as soon as it is scored."""
  confinement.allow_unsandboxed(unsandboxed_code)
  if run_limits:
    confinement.set_run_limits(**run_limits)
  reading.warm()  # the detectors' and verifiers' word lists and ICU, before any child forks
  while True:
    chunk = conn.recv()
    if chunk is None:
      return
    for domain, response, reference, meta, table in chunk:
      conn.send(score_one(domain, response, reference, meta, table, child_timeout_s))


class _Slot:
  def __init__(self, ctx, args: tuple):
    self.ctx, self.args = ctx, args
    self.start()

  def start(self):
    self.conn, child = self.ctx.Pipe()
    self.proc = self.ctx.Process(target=_serve, args=(child, *self.args), daemon=True)
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


DEFAULT_TIMEOUT_S = 30.0  # hard wall-clock kill of a pool process stuck on one item (a code
# item runs all its tests within code.score's own 5 s budget; an isolated judgement is killed
# at CHILD_SHARE of this; math-verify's own timeouts are 5 s per call)
CHILD_SHARE = 0.6
ALONE_WALL_FACTOR = 4.0  # a starved judgement's second try: this many times the wall clock


class VerifierPool:
  """Scores responses in `processes` spawned verifier processes (never in the caller: model text
  is judged away from the trainer and the worker). Each item of an isolated verifier runs in a
  confined throw-away child of its pool process; an item that hangs past `timeout_s` costs that
  process, which is replaced, and the item is a response error (0, counted), never a silent 0.
  `stats` counts what each verifier failed, blamed on the response, or scored again alone."""

  def __init__(
    self,
    processes: int = 2,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    routing: dict[str, str] | None = None,
    unsandboxed_code: bool = False,
    sandbox_memory_bytes: int | None = None,
    sandbox_pids: int | None = None,
  ):
    """`sandbox_memory_bytes`/`sandbox_pids`: ceilings on all code sandboxes of this pool
    together (defaults in `sandbox/confinement.py`: RUN_MEMORY_BYTES, RUN_PIDS)."""
    ctx = mp.get_context("spawn")  # never fork a process that holds JAX/threads
    run_limits = {
      "memory_bytes": sandbox_memory_bytes or confinement.RUN_MEMORY_BYTES,
      "pids": sandbox_pids or confinement.RUN_PIDS,
      "concurrent": processes,
    }
    args = (unsandboxed_code, CHILD_SHARE * timeout_s, run_limits)
    self.slots = [_Slot(ctx, args) for _ in range(processes)]
    self.timeout_s, self.routing = timeout_s, routing
    self.stats: collections.Counter = collections.Counter()

  def score_many(
    self, jobs: list[tuple[str, str, object, dict]], routing: dict[str, str] | None = None
  ) -> list[rewards.Score]:
    """jobs: (data_source, response, reference, meta) -> one Score each, in order."""
    batch = _Batch(self, jobs, {**(self.routing or {}), **(routing or {})})
    threads = [threading.Thread(target=batch.drain, args=(s,)) for s in self.slots]
    for t in threads:
      t.start()
    for t in threads:
      t.join()
    for i, (domain, _, _, _) in enumerate(jobs):  # a drain thread that crashed left a gap
      if not isinstance(batch.out[i], rewards.Score):
        batch.out[i] = rewards.Score(0.0, "not scored (verifier pool error)", failed=True)
        self._count(domain, batch.out[i])
    # Judgements cut short by other load: again, one at a time, with nothing else running.
    for i in [i for i, s in enumerate(batch.out) if s.starved]:
      batch.rejudge_alone(i)
    return batch.out

  def _count(self, domain: str, s: rewards.Score, starved_ok: bool = False):
    if s.starved and starved_ok:
      self.stats[f"{domain}/starved"] += 1
      return  # counted once it is judged again
    self.stats[f"{domain}/scored"] += 1
    for flag in s.flags:
      self.stats[f"{domain}/flagged/{flag}"] += 1
    if s.response_error:
      self.stats[f"{domain}/response_errors"] += 1
    elif s.failed and "timeout" not in s.reason:
      self.stats[f"{domain}/errors"] += 1

  def close(self):
    for s in self.slots:
      s.close()


class _Batch:
  """One `score_many` call: its jobs queued for the pool's processes, their scores in order."""

  def __init__(self, pool: VerifierPool, jobs: list, table: dict):
    self.pool, self.jobs, self.table = pool, jobs, table
    self.out: list = [None] * len(jobs)
    self.todo: queue.Queue = queue.Queue()
    for i, job in enumerate(jobs):
      self.todo.put((i, job))
    self.chunk_size = max(1, min(64, -(-len(jobs) // len(pool.slots))))

  def _chunk(self) -> list:
    chunk = []
    while len(chunk) < self.chunk_size:
      try:
        chunk.append(self.todo.get_nowait())
      except queue.Empty:
        break
    return chunk

  def drain(self, slot: _Slot) -> None:
    """Scores chunks in `slot`'s process until the queue is empty. One message per chunk (IPC
    per item costs more than a cheap verifier); results come back one by one, each under its
    own wall-clock limit."""
    while chunk := self._chunk():
      if not slot.send([(d, r, ref, m, self.table) for _, (d, r, ref, m) in chunk]):
        for i, (domain, _, _, _) in chunk:
          self.out[i] = rewards.Score(0.0, "verifier process could not be started", failed=True)
          self.pool._count(domain, self.out[i])
        continue
      for k, (i, (domain, _, _, meta)) in enumerate(chunk):
        if self._receive(slot, i, domain, meta):
          slot.kill_and_restart()
          for rest in chunk[k + 1 :]:  # the rest of the chunk goes back to the queue
            self.todo.put(rest)
          break

  def _receive(self, slot: _Slot, i: int, domain: str, meta: dict) -> bool:
    """Job i's score from `slot`; True when the process is lost (dead, or stuck past the
    limit: the response's doing)."""
    pool = self.pool
    try:  # a starved judgement's second try has more wall clock (meta wall_factor)
      ready = slot.conn.poll(pool.timeout_s * float(meta.get("wall_factor", 1.0)))
    except (OSError, EOFError):
      ready = True  # a dead pipe: recv below says so
    lost = not ready
    if ready:
      try:
        self.out[i] = slot.conn.recv()
      except (EOFError, OSError):  # the verifier process died (e.g. killed by the OS)
        self.out[i] = rewards.Score(0.0, "verifier process died", failed=True)
        lost = True
    else:
      why = f"response error: verifier timeout after {pool.timeout_s:g}s"
      self.out[i] = rewards.Score(0.0, why, response_error=True)
      pool.stats[f"{domain}/timeouts"] += 1
    pool._count(domain, self.out[i], starved_ok=True)
    return lost

  def rejudge_alone(self, i: int) -> None:
    """Job i again, alone, with ALONE_WALL_FACTOR x the wall clock and the same CPU; starved
    even so, it starved itself: a response error."""
    d, r, ref, m = self.jobs[i]
    self.todo.put((i, (d, r, ref, dict(m, wall_factor=ALONE_WALL_FACTOR))))
    self.drain(self.pool.slots[0])
    if self.out[i].starved:
      why = f"response error: {self.out[i].reason}, even judged alone"
      self.out[i] = rewards.Score(0.0, why, response_error=True)
      self.pool._count(d, self.out[i])
