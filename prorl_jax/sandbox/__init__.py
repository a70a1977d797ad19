"""Runs untrusted Python programs under bubblewrap (`bwrap`), one fresh sandbox per run.

Per run: new user, PID, IPC, UTS, network, mount and cgroup namespaces; nested user namespaces
disabled; `--die-with-parent` and a new session; a seccomp filter (built with libseccomp) that
refuses ptrace, cross-process memory access, io_uring, bpf, perf, keyrings, userfaultfd, mounts
and the other DENIED_SYSCALLS. The root file system holds only what the
interpreter needs, read-only: `/usr` (the system Python and its stdlib) and the `/bin`, `/lib*`
links, plus the interpreter's own prefix when it lives elsewhere. No host working directory,
run directory, exchange, data, `/etc`, `/run`, `/var` or `/sys`. `/proc` is the sandbox's own
PID namespace; `/dev` is a minimal read-only device set; `/tmp` (the work dir) and `/dev/shm`
are private tmpfs mounts with a size cap. As root, each run also gets a host uid of its own
(allocated under a lock, never shared by two live sandboxes); not as root, the sandbox runs in
an unprivileged user namespace of the calling user. Inside, a small runner sets rlimits (CPU,
address space, processes, file size, open files, no core dumps) before the program's first
line, so the process limit counts only the sandbox's own processes.

The program's pid 1 is bubblewrap's reaper: when the program exits, or its time is up and the
sandbox is killed, the kernel kills every process left in the namespace; stdout and stderr are
pipes, read until every process holding them is gone. stdout is read up to a cap; a program
that writes more is stopped and its run marked `output_overflow`, never compared on a prefix.

All sandboxes of a run together are capped too (`set_run_limits`): where this host lets us make a
cgroup (v2, or v1's memory and pids controllers), every sandbox joins one run cgroup with a memory
ceiling and a process ceiling; elsewhere each sandbox's per-process limits shrink so that their
product over the sandboxes that can run at once fits the same budget. Every sandbox runs with
`oom_score_adj` 1000, so the kernel's OOM killer picks a test program before the trainer or the
engine. Each case's CPU time is measured (`RunResult.cpu_seconds`): a case cut at the wall clock
with little CPU time, and switched out by the scheduler more often than it gave the CPU up itself,
was starved by other load (`RunResult.starved`), not slow; one that slept or blocked is not.

`check()` probes once per process that the sandbox works and isolates (only loopback, only its
own processes, not root, host paths invisible); `run()` raises `SandboxUnavailable` with one
line naming the fix when it does not. `allow_unsandboxed()` is the explicit opt-out for trusted
data: programs then run as plain subprocesses with the same rlimits and no isolation. The package
knows nothing of verifiers: `bwrap.py` builds the command line, `confinement.py` holds the
seccomp list, the run's cgroup and the rlimits, `runner.py` is the program that runs first inside.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import fcntl
import functools
import json
import logging
import marshal
import os
import random
import selectors
import shutil
import signal
import subprocess
import tempfile
import time

from prorl_jax.sandbox.bwrap import SandboxUnavailable, bwrap_argv, data_fd, python, seccomp_filter
from prorl_jax.sandbox.confinement import (  # allow_unsandboxed: the opt-out is sandbox API too
  LIMITS,
  RLIMITS,
  RUN_LIMITS,
  allow_unsandboxed,  # noqa: F401
  enter_sandbox,
  unsandboxed,
)
from prorl_jax.sandbox.runner import RUNNER

log = logging.getLogger(__name__)

INSTALL_HINT = (
  "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`; Fedora: "
  "`dnf install bubblewrap`)"
)
USERNS_HINT = (
  "enable unprivileged user namespaces (`sysctl -w kernel.unprivileged_userns_clone=1`"
  "; on Ubuntu 24.04+ also `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`)"
  " or run the rollout worker as root"
)


LIBSECCOMP_HINT = "install libseccomp (Debian/Ubuntu: `apt-get install libseccomp2`)"

# Host uids for sandboxes when running as root: one per live sandbox, taken under a lock file.
UID_BASE, UID_COUNT = 1_900_000_000, 4096
_UID_LOCK_DIR = "/run/prorl_sandbox"

RESULT_MARK = "\n__PRORL_RESULT__"

STARVED_CPU_SHARE = 0.5  # a case timed out with less CPU than this share of its wall time


@dataclasses.dataclass
class RunResult:
  """One sandboxed run: output, exit status, and whether it timed out, overflowed or starved."""

  stdout: str
  stderr: str
  returncode: int | None
  timed_out: bool = False
  output_overflow: bool = False
  seconds: float = 0.0
  cpu_seconds: float = 0.0  # the case's own CPU time (its process and what it waited for)
  preempted: bool = False  # switched out more often than it yielded (wanted the CPU, got none)

  @property
  def ok(self) -> bool:
    return self.returncode == 0 and not self.timed_out and not self.output_overflow

  @property
  def starved(self) -> bool:
    """Cut at the wall clock with little CPU time while it wanted the CPU (preempted, not
    sleeping or blocked): other load's doing, judged again alone before it counts."""
    return self.timed_out and self.preempted and self.cpu_seconds < STARVED_CPU_SHARE * self.seconds


@contextlib.contextmanager
def _host_uid():
  """As root: a host uid that no other live sandbox holds (flock on a per-uid file, released
  when this run ends or this process dies). Not as root: None (the caller's own uid)."""
  if os.geteuid() != 0:
    yield None
    return
  os.makedirs(_UID_LOCK_DIR, mode=0o700, exist_ok=True)
  start = random.randrange(UID_COUNT)
  for k in range(UID_COUNT):
    uid = UID_BASE + (start + k) % UID_COUNT
    fd = os.open(os.path.join(_UID_LOCK_DIR, f"uid-{uid}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      os.close(fd)
      continue
    try:
      yield uid
    finally:
      os.close(fd)
    return
  raise RuntimeError(f"all {UID_COUNT} sandbox uids are in use")


def run_cases(
  code: str,
  cases: list[dict],
  *,
  timeout_s: float,
  fn_name: str | None = None,
  limits: dict | None = None,
  prelude: str = "",
) -> list[RunResult]:
  """Runs `code` once per case in one fresh sandbox; all cases share `timeout_s` wall seconds.

  A case is {"stdin": str} (a stdin/stdout program) or {"args": [...]} (with `fn_name`: the
  program is imported and `fn_name(*args)` printed as JSON after RESULT_MARK), optionally with
  "stdout_bytes" (its stdout cap); `prelude` (the harness's imports) runs before the cases.
  Returns a RunResult per case that ran, in order: fewer when the time ran out (the last one
  then says `timed_out`) or the program killed the runner."""
  lim = dict(LIMITS, **RUN_LIMITS["limits"], **(limits or {}))
  if not unsandboxed():
    err = check()
    if err:
      raise SandboxUnavailable(err)
  job_cases = [
    {
      "stdin": c.get("stdin", "").encode(),
      "args": c.get("args", []),
      "stdout_cap": int(c.get("stdout_bytes", lim["stdout_bytes"])),
    }
    for c in cases
  ]
  job = {"code": code, "fn_name": fn_name, "cases": job_cases, "prelude": prelude}
  fd = data_fd(marshal.dumps(job), "job")
  opts = marshal.dumps(
    {
      "fd": fd,
      "mark": RESULT_MARK,
      "timeout_s": float(timeout_s),
      "isolated": not unsandboxed(),
      "stderr_cap": int(lim["stderr_bytes"]),
      "rlimits": [(name, int(lim[key])) for name, key in RLIMITS],
    }
  ).hex()
  cmd = [python(), "-I", "-S", "-c", RUNNER, opts]
  # The runner's report: every case's output and stderr in base64, one line per case.
  report_cap = sum(4 * (c["stdout_cap"] + lim["stderr_bytes"]) // 3 + 1024 for c in job_cases)
  host_lim = dict(lim, stdout_bytes=report_cap)
  try:
    if unsandboxed():
      with tempfile.TemporaryDirectory(prefix="prorl_unsandboxed_") as cwd:
        res = _communicate(cmd, cwd, None, (fd,), timeout_s + 5.0, host_lim)
    else:
      sfd = data_fd(seccomp_filter(), "seccomp")
      try:
        with _host_uid() as uid:
          res = _communicate(
            bwrap_argv(lim, sfd) + cmd, "/", uid, (fd, sfd), timeout_s + 5.0, host_lim
          )
      finally:
        os.close(sfd)
  finally:
    os.close(fd)
  out = []
  for line in res.stdout.splitlines()[: len(cases)]:
    try:  # the runner's report is parsed strictly: a program may have tampered with it
      rc, timed_out, overflow, secs, cpu, preempted, sout, serr = line.split(" ")
      out.append(
        RunResult(
          base64.b64decode(sout, validate=True).decode("utf-8", "replace"),
          base64.b64decode(serr, validate=True).decode("utf-8", "replace"),
          int(rc),
          timed_out == "1",
          overflow == "1",
          float(secs),
          float(cpu),
          preempted == "1",
        )
      )
    except (ValueError, binascii.Error):
      break  # a torn last line: the runner was killed mid-write
  if len(out) < len(cases) and not (out and out[-1].timed_out):
    why = (
      "the time budget ran out"
      if res.timed_out
      else (f"the sandbox runner stopped (exit {res.returncode}): {res.stderr.strip()[-200:]}")
    )
    out.append(RunResult("", why, None, timed_out=res.timed_out))
  return out


def run(code: str, *, stdin=b"", timeout_s: float, fn_name=None, args=None, limits=None):
  """One run of `code` in a fresh sandbox (see `run_cases`): its RunResult."""
  case = {"args": args or []} if fn_name else {"stdin": stdin.decode("utf-8", "replace")}
  return run_cases(code, [case], timeout_s=timeout_s, fn_name=fn_name, limits=limits)[0]


def _communicate(cmd, cwd, uid, pass_fds, timeout_s: float, lim: dict) -> RunResult:
  """Runs `cmd` (bwrap, or the bare runner) with no stdin; reads stdout up to its cap and
  stderr; kills it at `timeout_s` or on overflow, then waits for every holder of the pipes."""
  t0 = time.monotonic()
  procs = RUN_LIMITS["procs"]
  enter = None if uid is None and not procs else functools.partial(enter_sandbox, procs, uid)
  proc = subprocess.Popen(
    cmd,
    cwd=cwd,
    env={},
    preexec_fn=enter,
    stdin=subprocess.DEVNULL,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    pass_fds=pass_fds,
    start_new_session=True,
  )
  out, err = bytearray(), bytearray()
  caps = {
    proc.stdout.fileno(): (out, int(lim["stdout_bytes"])),
    proc.stderr.fileno(): (err, int(lim["stderr_bytes"])),
  }
  timed_out = overflow = killed = False
  sel = selectors.DefaultSelector()
  for f in (proc.stdout, proc.stderr):
    os.set_blocking(f.fileno(), False)
    sel.register(f, selectors.EVENT_READ)
  deadline = t0 + timeout_s
  grace = None  # after a kill: how long to wait for the pipes to close
  try:
    while sel.get_map():
      now = time.monotonic()
      if not killed and now >= deadline:
        timed_out = True
      if (timed_out or overflow) and not killed:
        _kill(proc, uid is None)
        killed, grace = True, now + 10.0
      if grace is not None and now > grace:
        break  # a process outlived the kill: reported below, never waited on forever
      wait = (grace if killed else deadline) - now
      for key, _ in sel.select(max(0.0, min(wait, 1.0))):
        f = key.fileobj
        chunk = os.read(f.fileno(), 1 << 16)
        if not chunk:
          sel.unregister(f)
          continue
        buf, cap = caps[f.fileno()]
        room = cap - len(buf)
        if room > 0:
          buf += chunk[:room]
        if len(chunk) > room and f is proc.stdout:
          overflow = True
  finally:
    sel.close()
    for f in (proc.stdout, proc.stderr):
      f.close()
    if proc.poll() is None:
      _kill(proc, uid is None)
    proc.wait()
  return RunResult(
    out.decode("utf-8", "replace"),
    err.decode("utf-8", "replace"),
    proc.returncode,
    timed_out,
    overflow,
    time.monotonic() - t0,
  )


def _kill(proc: subprocess.Popen, group: bool):
  """bwrap's death kills the namespace (--die-with-parent); unsandboxed, the process group."""
  try:
    if group:
      os.killpg(proc.pid, signal.SIGKILL)
    else:
      proc.kill()
  except (ProcessLookupError, PermissionError):
    pass


# What a sandboxed probe must see: only loopback, its own few processes, a non-root uid, an empty
# /tmp, none of the host's paths, and no way to make a user namespace.
_PROBE = r"""
import ctypes, json, os, socket
res = {"ifaces": [n for _, n in socket.if_nameindex()], "uid": os.getuid(),
       "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
       "tmp": os.listdir("/tmp"), "root": sorted(os.listdir("/")), "cwd": os.getcwd()}
libc = ctypes.CDLL(None, use_errno=True)
res["userns"] = libc.unshare(0x10000000) == 0  # CLONE_NEWUSER
res["ptrace"] = libc.ptrace(16, 1, 0, 0) == 0 or ctypes.get_errno() != 1  # ATTACH: want EPERM
print(json.dumps(res))
"""
_ALLOWED_TOP = {"bin", "dev", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp", "usr"}


@functools.lru_cache(maxsize=1)
def check() -> str | None:
  """None when the sandbox works and isolates here; else one line that says what to do."""
  if shutil.which("bwrap") is None:
    return f"code rewards need the bubblewrap sandbox (`bwrap` not found): {INSTALL_HINT}"
  try:
    bpf = seccomp_filter()
  except ImportError as e:
    return (
      f"the code sandbox's seccomp filter needs pyseccomp ({e}): pip install "
      "pyseccomp==0.1.2 (it is in requirements.txt)"
    )
  except (OSError, RuntimeError, AttributeError) as e:
    return f"the code sandbox's seccomp filter cannot be built ({e}): {LIBSECCOMP_HINT}"
  sfd = data_fd(bpf, "seccomp")
  try:
    with _host_uid() as uid:
      res = _communicate(
        bwrap_argv(LIMITS, sfd) + [python(), "-I", "-S", "-c", _PROBE],
        "/",
        uid,
        (sfd,),
        30.0,
        LIMITS,
      )
  except (OSError, subprocess.SubprocessError, SandboxUnavailable) as e:
    return f"the bubblewrap sandbox cannot start ({e}): {INSTALL_HINT}"
  finally:
    os.close(sfd)
  if res.returncode != 0:
    why = (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1]
    hint = USERNS_HINT if "namespace" in why or "Operation not permitted" in why else INSTALL_HINT
    return f"the bubblewrap sandbox cannot start ({why}): {hint}"
  try:
    got = json.loads(res.stdout)
  except ValueError:
    return f"the sandbox probe printed no result ({res.stdout[:80]!r}); {INSTALL_HINT}"
  problems = []
  if got["ifaces"] != ["lo"]:
    problems.append(f"network interfaces {got['ifaces']} (want only lo)")
  if got["uid"] == 0:
    problems.append("runs as root")
  if len(got["pids"]) > 3:
    problems.append(f"sees {len(got['pids'])} processes")
  if got["tmp"] or got["cwd"] != "/tmp":
    problems.append("no private /tmp work dir")
  if set(got["root"]) - _ALLOWED_TOP:
    problems.append(f"sees host paths {sorted(set(got['root']) - _ALLOWED_TOP)}")
  if got["userns"]:
    problems.append("can create user namespaces")
  if got["ptrace"]:
    problems.append("ptrace is not refused (no seccomp filter)")
  if problems:
    return f"the bubblewrap sandbox does not isolate here: {'; '.join(problems)}"
  return None


def describe() -> str:
  """One line for start-up logs: how code rewards run on this machine."""
  if unsandboxed():
    return "code rewards: UNSANDBOXED (explicit opt-out; trusted data only)"
  err = check()
  if err:
    return f"code rewards: unavailable: {err}"
  who = "a fresh host uid per run" if os.geteuid() == 0 else "an unprivileged user namespace"
  return f"code rewards: bubblewrap sandbox ({who}; interpreter {python()})"
