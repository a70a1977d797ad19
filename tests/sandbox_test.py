"""The code-reward sandbox (bubblewrap) against hostile programs, each an attack that worked on
an unsandboxed verifier: survivors, host visibility, other processes' memory, state that
outlives a run, unbounded output and disk, host sockets; and the pool around it."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid

import pytest

from prorl_jax import sandbox
from prorl_jax.rewards import code
from prorl_jax.rewards.pool import VerifierPool
from prorl_jax.sandbox import bwrap, confinement
from tests import socket_helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IS_ROOT = os.geteuid() == 0


def _py(src):
  return f"<think>plan</think>\n```python\n{src}\n```"


def _host_pids_with(marker: str) -> list[int]:
  """Host processes whose command line holds `marker` (this test's own excluded)."""
  out = []
  for p in os.listdir("/proc"):
    if not p.isdigit() or int(p) == os.getpid():
      continue
    try:
      with open(f"/proc/{p}/cmdline", "rb") as f:
        if marker.encode() in f.read():
          out.append(int(p))
    except OSError:
      pass
  return out


def _wait_gone(marker: str, seconds: float = 5.0) -> list[int]:
  end = time.time() + seconds
  while time.time() < end:
    if not _host_pids_with(marker):
      return []
    time.sleep(0.05)
  return _host_pids_with(marker)


def _daemon(marker: str) -> str:
  """A program that leaves a setsid'd grandchild (a `sleep` named by `marker`) and exits."""
  return (
    "import os\n"
    "if os.fork() == 0:\n"
    "  os.setsid()\n"
    "  if os.fork() == 0:\n"
    f"    os.execv('/usr/bin/sleep', ['sleep', '{marker}'])\n"
    "  os._exit(0)\n"
    "os.wait()\n"
    "print('parent done')\n"
  )


def test_the_sandbox_runs_and_isolates_here():
  assert shutil.which("bwrap"), "make test installs bubblewrap (Debian: apt-get install bubblewrap)"
  assert sandbox.check() is None
  res = sandbox.run(
    "import os, socket\nprint(os.getuid(), os.getpid(), os.getcwd(), "
    "[n for _, n in socket.if_nameindex()])",
    timeout_s=10,
  )
  uid, pid, cwd = res.stdout.split(None, 3)[:3]
  assert res.ok and (uid, cwd) == ("1000", "/tmp") and int(pid) <= 3, res  # its own PIDs
  assert "['lo']" in res.stdout


def test_the_probe_checks_isolation_not_internet(monkeypatch):
  """The start-up probe looks at what the program can see, so a sandbox that shares the host
  network is caught on a machine without internet too."""
  real = bwrap.bwrap_argv
  monkeypatch.setattr(
    sandbox, "bwrap_argv", lambda lim, fd: real(lim, fd)[:4] + ["--share-net"] + real(lim, fd)[4:]
  )
  sandbox.check.cache_clear()
  try:
    assert "network interfaces" in sandbox.check()
    with pytest.raises(bwrap.SandboxUnavailable, match="does not isolate"):
      sandbox.run("print(1)", timeout_s=5)
    s = code.score(_py("print(3)"), {"inputs": ["1 2\n"], "outputs": ["3\n"]})
    assert s.failed and "does not isolate" in s.reason  # a marked failure, never a 0
  finally:
    sandbox.check.cache_clear()


def test_seccomp_refuses_the_syscalls_that_reach_other_processes_or_the_kernel():
  """ptrace of the runner (to forge its report), io_uring, bpf, keyctl, perf, userfaultfd and
  mounts are refused with EPERM; ordinary syscalls still work."""
  src = textwrap.dedent("""
      import ctypes, os
      libc = ctypes.CDLL(None, use_errno=True)
      nr = {"ptrace": 101, "io_uring_setup": 425, "bpf": 321, "keyctl": 250,
            "perf_event_open": 298, "userfaultfd": 323, "mount": 165, "unshare": 272,
            "process_vm_readv": 310}
      args = {"ptrace": (16, os.getppid(), 0, 0), "io_uring_setup": (8, 0),
              "bpf": (0, 0, 0), "keyctl": (0, 0), "perf_event_open": (0, 0, -1, -1, 0),
              "userfaultfd": (0,), "mount": (0, 0, 0, 0, 0), "unshare": (0x20000,),
              "process_vm_readv": (os.getppid(), 0, 0, 0, 0, 0)}
      for name, n in nr.items():
          r = libc.syscall(n, *args[name])
          print(name, r, ctypes.get_errno())
      print("getpid", libc.syscall(39) == os.getpid())
      """)
  res = sandbox.run(src, timeout_s=10)
  assert res.ok, res
  lines = dict(line.split(" ", 1) for line in res.stdout.strip().splitlines())
  assert lines.pop("getpid") == "True"
  assert os.uname().machine == "x86_64"  # the syscall numbers above
  assert lines == {name: "-1 1" for name in lines}, lines  # each refused with EPERM


def test_a_missing_bwrap_is_one_line_naming_the_install(monkeypatch):
  monkeypatch.setattr(shutil, "which", lambda name: None)
  sandbox.check.cache_clear()
  try:
    err = sandbox.check()
    assert "apt-get install bubblewrap" in err and "\n" not in err
  finally:
    sandbox.check.cache_clear()


def test_a_daemon_does_not_outlive_its_run():
  marker = f"{1000 + os.getpid() % 1000}.{uuid.uuid4().int % 10**6}"
  res = sandbox.run(_daemon(marker), timeout_s=10)
  assert res.ok and "parent done" in res.stdout
  assert _host_pids_with(marker) == []  # gone by the time run() returns, no waiting
  # ... nor does one started by a program that is killed at its deadline
  res = sandbox.run(
    _daemon(marker).replace("print('parent done')", "while True: pass"), timeout_s=1.0
  )
  assert res.timed_out
  assert _host_pids_with(marker) == []


def test_a_survivor_cannot_touch_a_later_run():
  """A program that kills every process it can (kill -1) and then lingers, run beside correct
  programs: they are unaffected, and nothing of it is left afterwards."""
  hostile = (
    "import os, signal, time\n"
    "for _ in range(50):\n"
    "  try:\n    os.kill(-1, signal.SIGKILL)\n  except OSError:\n    pass\n"
    "  time.sleep(0.02)\n"
  )
  good = "import sys\nprint(sum(map(int, sys.stdin.read().split())))"
  results = {}

  def run(name, src, stdin):
    results[name] = sandbox.run(src, stdin=stdin, timeout_s=10)

  threads = [threading.Thread(target=run, args=("hostile", hostile, b""))] + [
    threading.Thread(target=run, args=(f"good{i}", good, f"{i} 5\n".encode())) for i in range(4)
  ]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  for i in range(4):
    assert results[f"good{i}"].ok and results[f"good{i}"].stdout.strip() == str(i + 5)


@pytest.mark.skipif(not IS_ROOT, reason="per-run host uids are allocated only as root")
def test_live_sandboxes_never_share_a_host_uid():
  with sandbox._host_uid() as a, sandbox._host_uid() as b, sandbox._host_uid() as c:
    assert len({a, b, c}) == 3
    assert all(u >= sandbox.UID_BASE for u in (a, b, c))
  # from another process too: the lock is per host, not per process
  held = subprocess.Popen(
    [
      sys.executable,
      "-c",
      (
        "import sys, time; sys.path.insert(0, sys.argv[1])\n"
        "from prorl_jax import sandbox\n"
        "sandbox.UID_COUNT = 1\n"
        "with sandbox._host_uid() as u:\n  print(u, flush=True); time.sleep(30)\n"
      ),
      ROOT,
    ],
    stdout=subprocess.PIPE,
    text=True,
  )
  try:
    assert int(held.stdout.readline()) == sandbox.UID_BASE
    old = sandbox.UID_COUNT
    sandbox.UID_COUNT = 2
    try:
      for _ in range(5):
        with sandbox._host_uid() as u:
          assert u == sandbox.UID_BASE + 1
    finally:
      sandbox.UID_COUNT = old
  finally:
    held.kill()
    held.wait()


def test_the_program_sees_no_host_process_path_or_file(tmp_path):
  """Attack: read every process's command line, follow the paths it names (the worker's
  exchange, the trainer's data), and read any world-readable file."""
  secret_dir = tempfile.mkdtemp(prefix="prorl-secret-")
  os.chmod(secret_dir, 0o755)
  secret = os.path.join(secret_dir, "tests.jsonl")
  with open(secret, "w") as f:
    f.write("EXPECTED-OUTPUT-42")
  os.chmod(secret, 0o644)
  host = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(60)", f"--exchange={secret_dir}", secret]
  )
  try:
    attack = (
      "import os\n"
      "found = []\n"
      "for p in os.listdir('/proc'):\n"
      "  if p.isdigit():\n"
      "    try:\n"
      "      found.append(open(f'/proc/{p}/cmdline', 'rb').read().decode(errors='replace'))\n"
      "    except OSError:\n"
      "      pass\n"
      f"paths = [{secret!r}, {secret_dir!r}, '/etc/passwd', '/root', '/work', {ROOT!r}, "
      "'/run', '/var/lock', '/run/lock', '/sys', '/home', '/proc/1/root/etc/passwd']\n"
      "for path in paths:\n"
      "  try:\n"
      "    found.append(open(path).read() if os.path.isfile(path) else str(os.listdir(path)))\n"
      "  except OSError as e:\n"
      "    found.append(f'no {path}')\n"
      "print(repr(found))\n"
    )
    res = sandbox.run(attack, timeout_s=10)
    assert res.ok, res
    assert "EXPECTED-OUTPUT-42" not in res.stdout and secret_dir not in res.stdout.replace(
      f"no {secret_dir}", ""
    ).replace(repr(secret_dir), "")
    assert "root:x:0" not in res.stdout  # no /etc/passwd
    for path in ("/root", "/work", ROOT, "/run", "/var/lock", "/sys", "/home"):
      assert f"no {path}" in res.stdout, path
    assert "time.sleep(60)" not in res.stdout  # the host process is invisible
  finally:
    host.kill()
    host.wait()
    shutil.rmtree(secret_dir)


def _as_nobody_env() -> tuple[str, dict]:
  """A world-readable copy of the sandbox modules (stdlib + pyseccomp) for a non-root process:
  `import sandbox` there is prorl_jax.sandbox."""
  import pyseccomp

  d = tempfile.mkdtemp(prefix="prorl-nobody-")
  for rel in (
    "prorl_jax/__init__.py",
    "prorl_jax/sandbox/__init__.py",
    "prorl_jax/sandbox/bwrap.py",
    "prorl_jax/sandbox/runner.py",
    "prorl_jax/sandbox/confinement.py",
  ):
    os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
    shutil.copy(os.path.join(ROOT, rel), os.path.join(d, rel))
  shutil.copy(pyseccomp.__file__, d)
  with open(os.path.join(d, "sandbox.py"), "w") as f:
    f.write(
      "from prorl_jax.sandbox import *  # noqa\n"
      "from prorl_jax.sandbox import allow_unsandboxed, check, run  # noqa\n"
    )
  for root, dirs, files in os.walk(d):
    os.chmod(root, 0o755)
    for name in files:
      os.chmod(os.path.join(root, name), 0o644)
  return d, {"PATH": "/usr/bin:/bin"}


@pytest.mark.skipif(not IS_ROOT, reason="switching to an unprivileged user needs root")
def test_as_non_root_the_program_cannot_read_the_verifiers_memory():
  """Not root: an unprivileged user namespace still isolates; the program cannot read the
  verifier's memory (/proc/<pid>/mem) to find the expected output."""
  d, env = _as_nobody_env()
  attack = textwrap.dedent("""
      import os
      needle = b"EXPECTED-SECRET-" + str(7000 + 731).encode()
      hits = []
      for p in [int(x) for x in os.listdir("/proc") if x.isdigit()]:
        try:
          maps = open(f"/proc/{p}/maps").read().splitlines()
          with open(f"/proc/{p}/mem", "rb") as mem:
            for line in maps:
              lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
              try:
                mem.seek(lo)
                if needle in mem.read(hi - lo):
                  hits.append(p)
              except (OSError, ValueError, OverflowError):
                pass
        except OSError:
          pass
      print("hits", sorted(set(hits) - {os.getpid()}))
      """)
  verifier = textwrap.dedent("""
      import json, os, sys
      sys.path.insert(0, sys.argv[1])
      import sandbox
      expected = "EXPECTED-" + "SECRET-" + str(7000 + 731)  # only in this process's memory
      assert sandbox.check() is None, sandbox.check()
      res = sandbox.run(sys.argv[2], timeout_s=20)
      print(json.dumps({"uid": os.getuid(), "out": res.stdout, "ok": res.ok}))
      """)
  try:
    out = subprocess.run(
      ["/usr/bin/python3", "-c", verifier, d, attack],
      user=65534,
      group=65534,
      extra_groups=[],
      env=env,
      cwd=d,
      capture_output=True,
      text=True,
      timeout=60,
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["uid"] == 65534 and got["ok"], got
    # the needle is in no memory the program can read but its own
    assert got["out"].strip() == "hits []", got
    # ... and the same attack, unsandboxed, finds it in the verifier
    leak = subprocess.run(
      [
        "/usr/bin/python3",
        "-c",
        verifier.replace("import sandbox\n", "import sandbox\nsandbox.allow_unsandboxed(True)\n"),
        d,
        attack,
      ],
      user=65534,
      group=65534,
      extra_groups=[],
      env=env,
      cwd=d,
      capture_output=True,
      text=True,
      timeout=60,
    )
    assert "hits [" in leak.stdout and "hits []" not in leak.stdout, leak.stdout
  finally:
    shutil.rmtree(d)


def test_sysv_ipc_and_lock_files_do_not_outlive_a_run():
  key = 0x5E000000 + uuid.uuid4().int % 0xFFFFFF
  first = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    f"shm = libc.shmget({key}, 4096, 0o1666)  # IPC_CREAT | 0666\n"
    "print('shm', shm)\n"
    "for d in ('/run/lock', '/var/lock', '/tmp', '/dev/shm'):\n"
    "  try:\n"
    "    open(d + '/prorl-stale', 'w').write('x'); print('wrote', d)\n"
    "  except OSError:\n"
    "    print('cannot', d)\n"
  )
  res = sandbox.run(first, timeout_s=10)
  assert res.ok and "shm -1" not in res.stdout, res  # it could make one, inside
  assert "cannot /run/lock" in res.stdout and "cannot /var/lock" in res.stdout
  second = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    f"print('shm', libc.shmget({key}, 0, 0))\n"
    "print([os.path.exists(d + '/prorl-stale') for d in ('/tmp', '/dev/shm')])\n"
  )
  res = sandbox.run(second, timeout_s=10)
  assert res.ok and res.stdout.split("\n")[:2] == ["shm -1", "[False, False]"], res
  with open("/proc/sysvipc/shm") as f:  # nothing leaked to the host either
    assert not any(line.split()[0] == str(key) for line in f.read().splitlines()[1:])


def test_shared_memory_cannot_hold_more_than_the_memory_limit():
  """A memfd written to (its pages are shared memory: outside RLIMIT_AS and the tmpfs caps)
  cannot be made; the ordinary way to hold memory stops at the address-space limit."""
  src = textwrap.dedent("""
      import os
      try:
          fd = os.memfd_create("hold", 0)
      except OSError as e:
          print("memfd refused", e.errno)
      else:
          chunk, held = b"x" * (64 << 20), 0
          try:
              while held < (1400 << 20):
                  os.write(fd, chunk)
                  held += len(chunk)
          except OSError:
              pass
          print("memfd held", held >> 20)
      try:
          hold = bytearray(1400 << 20)
          print("heap held", len(hold) >> 20)
      except MemoryError:
          print("heap refused")
      """)
  res = sandbox.run(src, timeout_s=20)
  assert res.ok, res
  assert res.stdout.split("\n")[:2] == ["memfd refused 1", "heap refused"], res.stdout
  assert confinement.LIMITS["mem_bytes"] < 1400 << 20


def test_disk_is_capped():
  src = (
    "import os\nn = 0\n"
    "try:\n"
    "  for i in range(200):\n"
    "    with open(f'/tmp/f{i}', 'wb') as f:\n"
    "      f.write(b'x' * (1 << 20))\n"
    "    n += 1\n"
    "except OSError as e:\n"
    "  print('stopped', n, e.errno)\n"
  )
  res = sandbox.run(src, timeout_s=20)
  assert res.ok, res
  n = int(res.stdout.split()[1])
  assert n <= confinement.LIMITS["tmpfs_bytes"] >> 20, res.stdout  # 32 MiB, not 200


def test_host_unix_sockets_are_unreachable():
  d = tempfile.mkdtemp(prefix="prorl-sock-")
  os.chmod(d, 0o755)
  servers = []
  for addr in (os.path.join(d, "service.sock"), "\0prorl-abstract-" + uuid.uuid4().hex[:8]):
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(addr)
    if not addr.startswith("\0"):
      os.chmod(addr, 0o777)
    srv.listen(5)
    servers.append((srv, addr))
  try:
    with socket_helpers.counting([srv for srv, _ in servers]) as hits:
      attack = "import socket\nfor addr in %r:\n" % [a for _, a in servers] + (
        "  s = socket.socket(socket.AF_UNIX)\n"
        "  try:\n    s.connect(addr); print('connected')\n"
        "  except OSError as e:\n    print('refused', e.errno)\n"
      )
      res = sandbox.run(attack, timeout_s=10)
      assert res.ok and "connected" not in res.stdout and res.stdout.count("refused") == 2, res
      time.sleep(0.3)
      assert hits == []
  finally:
    for srv, _ in servers:
      srv.close()
    shutil.rmtree(d)


def test_stdout_over_the_cap_fails_with_a_reason_and_large_correct_output_passes():
  spec = {"inputs": [""], "outputs": ["3\n"]}
  s = code.score(_py("import sys\nprint(3)\nsys.stdout.write('x' * (3 << 20))"), spec)
  assert s.value == 0.0 and not s.failed and "output over the stdout cap" in s.reason
  big = " ".join(["7"] * (1 << 20))  # 2 MiB of expected output is compared in full
  ok = code.score(_py("print(' '.join(['7'] * (1 << 20)))"), {"inputs": [""], "outputs": [big]})
  assert ok.value == 1.0, ok
  wrong_tail = code.score(
    _py("print(' '.join(['7'] * ((1 << 20) - 1) + ['8']))"), {"inputs": [""], "outputs": [big]}
  )
  assert wrong_tail.value == 0.0  # the last token past the first MiB decides


def test_the_pool_timeout_kills_the_sandbox_with_its_verifier():
  marker = f"{2000 + os.getpid() % 1000}.{uuid.uuid4().int % 10**6}"
  pool = VerifierPool(processes=1, timeout_s=3.0)
  try:
    stuck = _daemon(marker).replace("print('parent done')", "import time\ntime.sleep(600)")
    out = pool.score_many(
      [
        (
          "code",
          _py(stuck),
          json.dumps({"inputs": [""], "outputs": ["2718"]}),
          {"time_budget_s": 600},
        )
      ]
    )
    assert out[0].response_error and "timeout" in out[0].reason  # 0 for the response, counted
    assert _wait_gone(marker) == []  # the namespace died with its verifier
  finally:
    pool.close()


def test_a_verifier_that_died_while_idle_is_replaced():
  pool = VerifierPool(processes=2, timeout_s=10.0)
  try:
    for slot in pool.slots:
      slot.proc.kill()
      slot.proc.join(5)
    out = pool.score_many([("chain_sum", "<answer>5</answer>", "5", {})] * 4)
    assert [s.value for s in out] == [1.0] * 4 and not any(s.failed for s in out)
  finally:
    pool.close()


def test_a_verifier_killed_mid_item_is_a_marked_failure_never_none():
  import threading

  pool = VerifierPool(processes=1, timeout_s=60.0)
  try:
    slow = _py("import time\ntime.sleep(4)\nprint(2718)")
    jobs = [
      ("code", slow, {"inputs": [""], "outputs": ["2718"]}, {"time_budget_s": 30}),
      ("chain_sum", "<answer>5</answer>", "5", {}),
    ]
    got = {}
    t = threading.Thread(target=lambda: got.update(out=pool.score_many(jobs)))
    t.start()
    victim = pool.slots[0].proc
    children = f"/proc/{victim.pid}/task/{victim.pid}/children"
    deadline = time.time() + 120
    while not open(children).read().strip():  # inside the first item: its child is judging it
      assert time.time() < deadline and t.is_alive(), "the verifier never started the item"
      time.sleep(0.01)
    victim.kill()  # as the OS's OOM killer would
    t.join(60)
    out = got["out"]
    assert not victim.is_alive()
    assert out[0].failed and out[0].value == 0.0 and "died" in out[0].reason, out[0]
    assert out[1].value == 1.0 and not out[1].failed  # the replacement serves the rest
    assert pool.stats["code/errors"] == 1
    # inside the sandbox getppid() is the sandbox's own init, never the verifier: scored 0
    killer = _py("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
    again = pool.score_many([("code", killer, {"inputs": [""], "outputs": ["2718"]}, {})])
    assert again[0].value == 0.0 and not again[0].failed and pool.slots[0].proc.is_alive()
  finally:
    pool.close()


def test_unsandboxed_is_an_explicit_opt_in(caplog):
  confinement.allow_unsandboxed(True)
  try:
    res = sandbox.run("import os\nprint(os.getuid())", timeout_s=10)
    assert res.ok and res.stdout.strip() == str(os.getuid())  # no user namespace: it is us
    assert "UNSANDBOXED" in sandbox.describe()
  finally:
    confinement.allow_unsandboxed(False)
  assert "WITHOUT a sandbox" in caplog.text
  assert "bubblewrap sandbox" in sandbox.describe()


def test_the_trainer_stops_before_training_when_code_data_cannot_be_sandboxed(monkeypatch, caplog):
  from prorl_jax.config import ConfigError, base_config
  from prorl_jax.trainer import preflight
  from prorl_jax.trainer.placement import workers_plan

  cfg = base_config()
  monkeypatch.setattr(
    sandbox,
    "check",
    lambda: "code rewards need the bubblewrap sandbox (`bwrap` not found): install bubblewrap",
  )
  with pytest.raises(ConfigError, match="install bubblewrap .*rollout.unsandboxed_code=True"):
    preflight.check_code_sandbox(workers_plan(cfg), {"math", "code"})
  preflight.check_code_sandbox(
    workers_plan(cfg), {"math", "chain_sum"}
  )  # no code data: nothing to check
  cfg.rollout.local_workers = "0"
  preflight.check_code_sandbox(
    workers_plan(cfg), {"code"}
  )  # external workers check (and log) for themselves
  cfg.rollout.local_workers, cfg.rollout.unsandboxed_code = "1", True
  preflight.check_code_sandbox(workers_plan(cfg), {"code"})
  assert "WITHOUT a sandbox" in caplog.text
