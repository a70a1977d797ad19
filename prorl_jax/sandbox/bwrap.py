"""The bubblewrap command line of one sandbox: new user, network, PID, IPC and UTS namespaces, a
read-only root of /usr and the interpreter's prefix, small tmpfs mounts, a clean environment, and
the seccomp program that refuses `confinement.DENIED_SYSCALLS`."""

from __future__ import annotations

import errno
import functools
import os
import shutil
import subprocess
import sys

from prorl_jax.sandbox.confinement import DENIED_SYSCALLS

INNER_UID = 1000  # the uid the program sees


class SandboxUnavailable(RuntimeError):
  """bubblewrap or a kernel feature it needs is missing; the message says what to install."""


@functools.lru_cache(maxsize=1)
def python() -> str:
  """The interpreter that runs programs: $PRORL_SANDBOX_PYTHON, else the system python3."""
  for cand in (
    os.environ.get("PRORL_SANDBOX_PYTHON"),
    "/usr/bin/python3",
    "/usr/local/bin/python3",
    shutil.which("python3"),
    sys.executable,
  ):
    if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
      return cand
  raise SandboxUnavailable("no python3 interpreter to run programs with; set PRORL_SANDBOX_PYTHON")


@functools.lru_cache(maxsize=1)
def root_fs_args() -> tuple[str, ...]:
  """Read-only mounts: /usr, the top-level links into it, and the interpreter's prefix."""
  args = ["--ro-bind", "/usr", "/usr"]
  for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
    if os.path.islink(top):
      args += ["--symlink", os.readlink(top), top]
    elif os.path.isdir(top):
      args += ["--ro-bind", top, top]
  exe = os.path.realpath(python())
  if not exe.startswith("/usr/"):
    prefix = subprocess.run(
      [exe, "-I", "-S", "-c", "import sys; print(sys.base_prefix)"],
      capture_output=True,
      text=True,
      check=True,
    ).stdout.strip()
    args += ["--ro-bind", prefix, prefix]
  return tuple(args)


@functools.lru_cache(maxsize=1)
def seccomp_filter() -> bytes:
  """The compiled seccomp program (BPF) that refuses DENIED_SYSCALLS, built with libseccomp."""
  import pyseccomp  # lazy: a missing libseccomp is reported by check(), in one line

  f = pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)
  for name in DENIED_SYSCALLS:
    try:
      f.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
    except (ValueError, RuntimeError, OSError):
      pass  # not a system call on this architecture
  fd = os.memfd_create("prorl-seccomp", 0)
  try:
    with os.fdopen(os.dup(fd), "wb") as out:
      f.export_bpf(out)
    os.lseek(fd, 0, os.SEEK_SET)
    with os.fdopen(os.dup(fd), "rb") as inp:
      return inp.read()
  finally:
    os.close(fd)


def data_fd(data: bytes, name: str) -> int:
  """A memfd holding `data`, positioned at 0 (for bwrap --seccomp or the runner's job)."""
  fd = os.memfd_create(name, 0)  # not inheritable until pass_fds hands it over
  view = memoryview(data)
  while view:
    view = view[os.write(fd, view) :]
  os.lseek(fd, 0, os.SEEK_SET)
  return fd


def bwrap_argv(lim: dict, seccomp_fd: int) -> list[str]:
  """The bubblewrap command line of one sandbox under the limits `lim` with the seccomp program
  on `seccomp_fd`; the program's own argv follows it."""
  return [
    "bwrap",
    "--seccomp",
    str(seccomp_fd),
    "--unshare-all",
    "--unshare-user",
    "--disable-userns",
    "--die-with-parent",
    "--new-session",
    "--clearenv",
    "--uid",
    str(INNER_UID),
    "--gid",
    str(INNER_UID),
    "--hostname",
    "sandbox",
    *root_fs_args(),
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--size",
    str(int(lim["shm_bytes"])),
    "--tmpfs",
    "/dev/shm",
    "--remount-ro",
    "/dev",
    "--size",
    str(int(lim["tmpfs_bytes"])),
    "--tmpfs",
    "/tmp",
    "--remount-ro",
    "/",
    "--chdir",
    "/tmp",
    "--setenv",
    "PATH",
    "/usr/bin:/bin",
    "--setenv",
    "HOME",
    "/tmp",
    "--setenv",
    "LANG",
    "C.UTF-8",
    "--",
  ]
