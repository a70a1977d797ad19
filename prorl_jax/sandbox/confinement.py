"""What confines a process beyond its namespaces: the system calls the sandboxes refuse, the
run's cgroup (memory and process ceilings for all sandboxes together), the per-sandbox rlimits
(`LIMITS`) and the run's share of them (`set_run_limits`), the explicit opt-out for trusted data
(`allow_unsandboxed`), and the steps a sandbox's process takes between fork and exec. Used by
`sandbox/__init__.py`, `sandbox/bwrap.py` and the verifier pool's `rewards/isolate.py`."""

from __future__ import annotations

import contextlib
import logging
import os

log = logging.getLogger("prorl_jax.sandbox")

_CGROUP_ROOT = "/sys/fs/cgroup"

# Syscalls a test program never needs that widen the kernel's attack surface or reach other
# processes: refused with EPERM by a seccomp filter (the families Docker's default profile
# denies, plus io_uring and the new mount API).
DENIED_SYSCALLS = (
  # anonymous shared memory lives outside RLIMIT_AS and the sized tmpfs mounts: a memfd written
  # to (not mapped) would hold memory beyond every per-process limit
  "memfd_create",
  "memfd_secret",
  "ptrace",
  "process_vm_readv",
  "process_vm_writev",
  "kcmp",
  "pidfd_getfd",
  "bpf",
  "perf_event_open",
  "userfaultfd",
  "io_uring_setup",
  "io_uring_enter",
  "io_uring_register",
  "keyctl",
  "add_key",
  "request_key",
  "mount",
  "umount2",
  "pivot_root",
  "chroot",
  "unshare",
  "setns",
  "open_tree",
  "move_mount",
  "fsopen",
  "fsconfig",
  "fsmount",
  "fspick",
  "mount_setattr",
  "open_by_handle_at",
  "name_to_handle_at",
  "fanotify_init",
  "kexec_load",
  "kexec_file_load",
  "init_module",
  "finit_module",
  "delete_module",
  "reboot",
  "swapon",
  "swapoff",
  "acct",
  "quotactl",
  "syslog",
  "settimeofday",
  "clock_settime",
  "clock_adjtime",
  "adjtimex",
  "iopl",
  "ioperm",
  "modify_ldt",
  "vm86",
  "vm86old",
  "uselib",
  "lookup_dcookie",
  "personality",
  "mbind",
  "set_mempolicy",
  "move_pages",
  "sysfs",
  "ustat",
  "nfsservctl",
  "_sysctl",
  "create_module",
  "get_kernel_syms",
  "query_module",
)


def own_cgroups() -> dict[str, str]:
  """{controller or "": path} of this process (/proc/self/cgroup; "" is cgroup v2)."""
  out = {}
  try:
    with open("/proc/self/cgroup") as f:
      for line in f:
        _, ctrls, path = line.rstrip("\n").split(":", 2)
        for c in ctrls.split(",") if ctrls else [""]:
          out[c] = path
  except OSError:
    pass
  return out


def _limit_files(name: str, memory_bytes: int, pids: int) -> list[tuple[str, str, int]] | None:
  """(directory, limit file, value) of a cgroup `name` below this process's own (v1 memory +
  pids, or v2); None when this host has neither."""
  own = own_cgroups()
  v1 = [("memory", "memory.limit_in_bytes", memory_bytes), ("pids", "pids.max", pids)]
  if all(c in own for c, _, _ in v1):
    return [(os.path.join(_CGROUP_ROOT, c, own[c].lstrip("/"), name), f, v) for c, f, v in v1]
  if "" in own:
    d = os.path.join(_CGROUP_ROOT, own[""].lstrip("/"), name)
    return [(d, "memory.max", memory_bytes), (d, "pids.max", pids)]
  return None


def _write_limits(dirs: list[tuple[str, str, int]]) -> tuple[str, ...] | None:
  try:
    for d, f, v in dirs:
      os.makedirs(d, exist_ok=True)
      with open(os.path.join(d, f), "w") as fh:
        fh.write(str(int(v)))
      if f == "memory.limit_in_bytes":  # swap too, where the kernel accounts it
        with contextlib.suppress(OSError):
          with open(os.path.join(d, "memory.memsw.limit_in_bytes"), "w") as fh:
            fh.write(str(int(v)))
  except OSError:
    return None
  return tuple(sorted({os.path.join(d, "cgroup.procs") for d, _, _ in dirs}))


def make_cgroup(name: str, memory_bytes: int, pids: int, cages: int = 1) -> tuple[str, ...] | None:
  """The run cgroup `name` (limits written) and, below it, this process's own cage with
  1/`cages` of each limit, where the sandboxes this process starts run: a sibling sandbox of
  another process can neither fill its memory nor its process table. Returns the cage's
  cgroup.procs files; None when this host does not let us make them. Cages of processes that
  are gone are removed."""
  run = _limit_files(name, memory_bytes, pids)
  if run is None or _write_limits(run) is None:
    return None
  for d in {d for d, _, _ in run}:
    for old in os.listdir(d):
      pid = old.removeprefix("sample-")
      if old.startswith("sample-") and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
        with contextlib.suppress(OSError):
          os.rmdir(os.path.join(d, old))
  cage = [
    (os.path.join(d, f"sample-{os.getpid()}"), f, max(1, v // max(cages, 1))) for d, f, v in run
  ]
  return _write_limits(cage)


def enter_sandbox(procs: tuple[str, ...], uid: int | None):
  """Runs in the sandbox's process between fork and exec (before bubblewrap starts): first in
  line for the OOM killer, into the run's cgroup, then the sandbox's own host uid (so the
  cgroup is joined with the rights to join it). Only system calls: no locks, no allocation
  beyond a few bytes."""
  try:
    fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
    os.write(fd, b"1000")
    os.close(fd)
  except OSError:
    pass
  me = str(os.getpid()).encode()
  for path in procs:
    fd = os.open(path, os.O_WRONLY)  # an error here stops the run: the ceiling must hold
    try:
      os.write(fd, me)
    finally:
      os.close(fd)
  if uid is not None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


LIMITS = {
  "cpu_s": 5,  # RLIMIT_CPU
  "mem_bytes": 1 << 30,  # RLIMIT_AS, per process
  "nproc": 32,  # RLIMIT_NPROC, processes + threads inside this sandbox
  "fsize_bytes": 8 << 20,  # RLIMIT_FSIZE, per file written
  "nofile": 64,  # RLIMIT_NOFILE
  "tmpfs_bytes": 32 << 20,  # /tmp (the work dir), all files together
  "shm_bytes": 8 << 20,  # /dev/shm
  "stdout_bytes": 1 << 20,  # read cap of stdout; more is an `output_overflow` failure
  "stderr_bytes": 64 << 10,  # kept of stderr (the rest is read and dropped)
}


RLIMITS = (
  ("RLIMIT_CPU", "cpu_s"),
  ("RLIMIT_AS", "mem_bytes"),
  ("RLIMIT_NPROC", "nproc"),
  ("RLIMIT_FSIZE", "fsize_bytes"),
  ("RLIMIT_NOFILE", "nofile"),
)


# All code sandboxes of a run together (the defaults of rollout.sandbox_memory_gib/_pids).
RUN_MEMORY_BYTES = 4 << 30


RUN_PIDS = 256


RUN_LIMITS = {"limits": {}, "procs": (), "how": "per-sandbox rlimits only"}


def set_run_limits(memory_bytes: int, pids: int, concurrent: int, name: str | None = None) -> str:
  """Caps all sandboxes of this run together: `memory_bytes` and `pids` over at most
  `concurrent` sandboxes at once, each sandbox in a cage of its share. A cgroup named `name`
  (default $PRORL_SANDBOX_GROUP, else one per parent process) with this process's cage below it
  (one sandbox at a time runs in it) where the host allows it; else per-sandbox rlimits whose
  product over `concurrent` sandboxes fits the budget. Returns one line saying which."""
  name = name or os.environ.get("PRORL_SANDBOX_GROUP") or f"prorl-sandboxes-{os.getppid()}"
  # the workers sharing this budget ($PRORL_SANDBOX_SHARERS) each run `concurrent`
  concurrent *= max(1, int(os.environ.get("PRORL_SANDBOX_SHARERS", "1") or 1))
  procs = None if unsandboxed() else make_cgroup(name, memory_bytes, pids, concurrent)
  if procs:
    RUN_LIMITS.update(
      limits={},
      procs=procs,
      how=f"cgroup {name}: {memory_bytes >> 20} MiB, {pids} pids; this process's sandboxes "
      f"in a cage of {memory_bytes // concurrent >> 20} MiB, {max(1, pids // concurrent)} pids",
    )
  else:
    nproc = max(2, min(LIMITS["nproc"], pids // max(concurrent, 1), 8))
    per = memory_bytes // max(concurrent, 1)
    mem = min(LIMITS["mem_bytes"], max(64 << 20, (per - LIMITS["tmpfs_bytes"]) // nproc))
    RUN_LIMITS.update(
      limits={"nproc": nproc, "mem_bytes": mem},
      procs=(),
      how=f"no cgroup here: {nproc} processes x {mem >> 20} MiB per sandbox, {concurrent} at once",
    )
  return RUN_LIMITS["how"]


def run_limits() -> str:
  return RUN_LIMITS["how"]


_UNSANDBOXED = {"on": False}


def allow_unsandboxed(on: bool = True):
  """The explicit opt-out for trusted data: programs run without isolation (rlimits only)."""
  if on and not _UNSANDBOXED["on"]:
    log.warning(
      "!!! code rewards run WITHOUT a sandbox (unsandboxed_code is set): programs see "
      "this machine, its files and its network; use only with trusted data"
    )
  _UNSANDBOXED["on"] = bool(on)


def unsandboxed() -> bool:
  return _UNSANDBOXED["on"]
