"""Scores one response in a throw-away child process: no model text is judged by trusted code.

The verifier pool process forks a child per response for every verifier that runs third-party
checkers (math-verify and sympy, Reasoning Gym's scorers, langdetect). The child:
- holds none of the pool's descriptors but the one pipe its verdict goes back on;
- runs under a seccomp filter that refuses opening files for writing, creating, renaming or
  deleting files, sockets, starting programs or processes or threads, signalling other
  processes, and the DENIED_SYSCALLS of the code sandbox;
- has rlimits on memory (its current size plus `mem_bytes`), CPU seconds, file size (0) and core
  dumps, and `oom_score_adj` 1000, so the kernel's OOM killer takes it before the trainer.
Whatever an answer does to the child's memory (a rebound function, a poisoned cache) dies with it;
the next response is scored by a fresh copy of the untouched pool process. The verdict comes back
as a small JSON object, parsed strictly (never pickle: the child may be compromised), so a child
can at most lie about its own response's score — which is why the scorers that would evaluate an
answer are replaced by project-owned ones (`rewards/puzzles.py`).

A child killed at its wall-clock limit is judged on its CPU time: one that computed for at least
half of the limit, or that slept or blocked (it gave the CPU up more often than the scheduler
took it), is the response's fault (0, `response_error`); one that wanted the CPU and got little
was starved by other load and is marked `starved`, for the pool to score again alone.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import math
import os
import resource
import select
import signal
import time

from prorl_jax.rewards import detectors
from prorl_jax.rewards.common import Score
from prorl_jax.sandbox.confinement import DENIED_SYSCALLS

VERDICT_BYTES = 64 << 10  # the most a child may send back
STARVED_CPU_SHARE = 0.5  # a timed-out child that used less CPU than this share was starved

# Syscalls a scorer never needs; the code sandbox's list comes on top.
_DENIED = (
  "socket",
  "socketpair",
  "connect",
  "bind",
  "listen",
  "accept",
  "accept4",
  "sendto",
  "sendmsg",
  "sendmmsg",
  "execve",
  "execveat",
  "fork",
  "vfork",
  "clone",
  "clone3",
  "kill",
  "tkill",
  "tgkill",
  "rt_sigqueueinfo",
  "rt_tgsigqueueinfo",
  "pidfd_open",
  "pidfd_send_signal",
  "creat",
  "unlink",
  "unlinkat",
  "rename",
  "renameat",
  "renameat2",
  "mkdir",
  "mkdirat",
  "rmdir",
  "link",
  "linkat",
  "symlink",
  "symlinkat",
  "chmod",
  "fchmod",
  "fchmodat",
  "chown",
  "fchown",
  "lchown",
  "fchownat",
  "truncate",
  "ftruncate",
  "mknod",
  "mknodat",
  "utime",
  "utimes",
  "utimensat",
  "futimesat",
  "setxattr",
  "lsetxattr",
  "fsetxattr",
  "removexattr",
  "lremovexattr",
  "fremovexattr",
  "setrlimit",
  "prlimit64",
  "memfd_create",
  "shmget",
  "msgget",
  "semget",
  "mq_open",
  "inotify_init",
  "inotify_init1",
)
_WRITE_FLAGS = (os.O_WRONLY, os.O_RDWR, os.O_CREAT, os.O_TRUNC, os.O_APPEND)


@functools.lru_cache(maxsize=1)
def _seccomp():
  """The child's filter (built once in the pool process, loaded in each child)."""
  import pyseccomp as sc  # lazy: only the confined child builds a filter

  f = sc.SyscallFilter(defaction=sc.ALLOW)
  deny = sc.ERRNO(errno.EPERM)
  for name in DENIED_SYSCALLS + _DENIED:
    try:
      f.add_rule(deny, name)
    except (ValueError, RuntimeError, OSError):
      pass  # not a system call on this architecture
  for flag in _WRITE_FLAGS:  # open/openat for writing; reading (lazy imports) stays allowed
    for name, arg in (("open", 1), ("openat", 2)):
      try:
        f.add_rule(deny, name, sc.Arg(arg, sc.MASKED_EQ, flag, flag))
      except (ValueError, RuntimeError, OSError):
        pass
  return f


def _vm_bytes() -> int:
  with open("/proc/self/statm") as f:
    return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _child(out_fd: int, fn, args: tuple, kwargs: dict, mem_bytes: int, cpu_s: float):
  """In the forked child: confine, score, send the verdict, exit. Never returns."""
  code = 0
  try:
    os.dup2(out_fd, 3)
    for fd in [int(f) for f in os.listdir("/proc/self/fd")]:  # the open ones, not 65,536 closes
      if fd > 3:
        with contextlib.suppress(OSError):
          os.close(fd)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    try:
      with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")
    except OSError:
      pass
    limit = _vm_bytes() + mem_bytes
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    cpu = max(1, math.ceil(cpu_s))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _seccomp().load()
    try:
      s = fn(*args, **kwargs)
      verdict = {
        "value": float(s.value),
        "reason": str(s.reason)[:500],
        "failed": bool(s.failed),
        "response_error": bool(s.response_error),
        "starved": bool(s.starved),
        "flags": [str(f)[:40] for f in s.flags[:16]],
      }
    except Exception as e:  # noqa: BLE001 - the response broke its judgement (`safe_score`)
      verdict = _error_verdict(e)
    data = json.dumps(verdict).encode()[:VERDICT_BYTES]
    view = memoryview(data)
    while view:
      view = view[os.write(3, view) :]
  except BaseException:  # noqa: BLE001 - nothing may escape a forked child
    code = 1
  finally:
    os._exit(code)


def _error_verdict(e: BaseException) -> dict:
  return {
    "value": 0.0,
    "reason": f"response error: {type(e).__name__}: {str(e)[:120]}",
    "failed": False,
    "response_error": True,
    "starved": False,
  }


def _parse(data: bytes) -> Score | None:
  try:
    d = json.loads(data.decode())
    value = float(d["value"])
    s = Score(
      value if math.isfinite(value) else -1.0,
      str(d["reason"]),
      failed=d["failed"] is True,
      response_error=d["response_error"] is True,
      starved=d["starved"] is True,
      flags=tuple(f for f in d.get("flags", ()) if f in detectors.FLAGS),  # only known names
    )
  except (ValueError, KeyError, TypeError, UnicodeDecodeError, AttributeError):
    return None
  return s


def _read_verdict(r: int, deadline: float) -> tuple[bytes, bool]:
  """(what the child wrote, up to a verdict's worth past VERDICT_BYTES; whether the deadline
  passed first)."""
  buf = bytearray()
  while len(buf) <= VERDICT_BYTES:
    left = deadline - time.monotonic()
    if left <= 0:
      return bytes(buf), True
    ready, _, _ = select.select([r], [], [], left)
    if not ready:
      continue
    chunk = os.read(r, 1 << 16)
    if not chunk:
      break
    buf += chunk
  return bytes(buf), False


def _no_verdict(status: int) -> Score:
  """The child ended without a verdict: a limit killed it, or it exited."""
  code = os.waitstatus_to_exitcode(status)
  why = f"killed by signal {-code}" if code < 0 else f"exit {code}"
  if code == -signal.SIGXCPU or code == -signal.SIGKILL:
    return Score(0.0, f"response error: verifier {why} (CPU or memory limit)", response_error=True)
  return Score(0.0, f"response error: verifier child {why} without a verdict", response_error=True)


def run(
  fn, *args, timeout_s: float, mem_bytes: int = 1 << 30, cpu_s: float | None = None, **kwargs
) -> Score:
  """`fn(*args, **kwargs) -> Score` in a confined throw-away child (see the module docstring)."""
  _seccomp()  # built here once (cached), so each child only loads it
  r, w = os.pipe()
  t0 = time.monotonic()
  pid = os.fork()
  if pid == 0:
    os.close(r)
    _child(w, fn, args, kwargs, mem_bytes, cpu_s if cpu_s is not None else timeout_s)
  os.close(w)
  timed_out = True
  try:
    buf, timed_out = _read_verdict(r, t0 + timeout_s)
  finally:
    os.close(r)
    if timed_out:
      try:
        os.kill(pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
    _, status, usage = os.wait4(pid, 0)
  wall = time.monotonic() - t0
  cpu = usage.ru_utime + usage.ru_stime
  if timed_out:
    if cpu < STARVED_CPU_SHARE * wall and usage.ru_nivcsw > usage.ru_nvcsw:
      return Score(0.0, f"starved: {cpu:.1f}s of CPU in {wall:.1f}s", starved=True)
    return Score(0.0, f"response error: verifier timeout after {timeout_s:g}s", response_error=True)
  got = _parse(buf) if os.waitstatus_to_exitcode(status) == 0 else None
  return got if got is not None else _no_verdict(status)
