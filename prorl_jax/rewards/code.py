"""Code: run the last fenced python block against the item's tests in a sandbox.

Tests come in the PRIME/TACO/APPS formats: `{"inputs": [...], "outputs": [...]}` (stdin/stdout
cases), optionally with `"fn_name"` (function-call cases: inputs are argument lists). Score =
fraction of tests passed; all tests share one wall-clock budget (5 s by default).

The sandbox, per run: a fresh temp directory as cwd, an empty environment, `python -I`; limits
on CPU time, address space, processes, file size and open files; its own session, and every
process of the run killed when it ends or times out; a new network namespace (no network) and a
private /tmp where the kernel allows it; as root, the child drops to a per-sandbox unprivileged
uid (so it cannot signal, read or write anything of ours). Never a shell. `sandbox_status()`
says what isolation is available; the verifier pool logs it loudly at start-up.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from prorl_jax.rewards import Score

_FENCE = re.compile(r"```(?:python|py|Python3?)?[ \t]*\n(.*?)```", re.S)
CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
MS_REC, MS_PRIVATE = 0x4000, 1 << 18

LIMITS = {"cpu_s": 5, "mem_bytes": 1 << 30, "nproc": 32, "fsize_bytes": 8 << 20, "nofile": 64}

_HARNESS = """
import json, sys
src = open("solution.py").read()
ns = {"__name__": "solution"}
exec(compile(src, "solution.py", "exec"), ns)
args = json.loads(open("args.json").read())
fn = ns.get(sys.argv[1])
if fn is None:
    for v in ns.values():
        if isinstance(v, type) and hasattr(v, sys.argv[1]):
            fn = getattr(v(), sys.argv[1])
            break
out = fn(*args)
sys.stdout.write("\\n__RESULT__" + json.dumps(out))
"""


def extract_code(response: str) -> str | None:
  text = response.rsplit("</think>", 1)[-1]
  blocks = _FENCE.findall(text)
  return blocks[-1] if blocks else None


def _libc():
  return ctypes.CDLL(None, use_errno=True)


def _try_isolate() -> list[str]:
  """In the child: new network + mount namespaces, private /tmp. Returns what worked."""
  done = []
  libc = _libc()
  if libc.unshare(CLONE_NEWNET | CLONE_NEWNS) == 0:
    done.append("netns")
    libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None)
    for d in (b"/tmp", b"/var/tmp", b"/dev/shm"):
      if os.path.isdir(d) and libc.mount(b"tmpfs", d, b"tmpfs", 0, b"size=16m") == 0:
        done.append(d.decode())
  return done


@functools.lru_cache(maxsize=1)
def sandbox_status() -> dict:
  """Probes once what isolation this machine allows (runs a child that tries it)."""
  probe = ("import os, socket\n"
           "s = socket.socket(); s.settimeout(0.5)\n"
           "try:\n  s.connect(('1.1.1.1', 53)); print('net')\n"
           "except OSError:\n  print('nonet')\n")
  d = workdir()
  try:
    res = run_python(probe, d, stdin=b"", timeout_s=10)
    net_blocked = res["stdout"].strip().endswith("nonet")
  finally:
    shutil.rmtree(d, ignore_errors=True)
  return {"root": os.geteuid() == 0, "network_blocked": net_blocked,
          "isolation": res.get("isolation", [])}


@functools.lru_cache(maxsize=1)
def sandbox_python() -> str:
  """An interpreter the unprivileged sandbox uid can execute (a venv under /root is not one):
  $PRORL_SANDBOX_PYTHON, else the system python3, else this interpreter."""
  for cand in (os.environ.get("PRORL_SANDBOX_PYTHON"), "/usr/bin/python3",
               "/usr/local/bin/python3"):
    if cand and os.path.isfile(cand):
      real = os.path.realpath(cand)
      if os.stat(real).st_mode & 0o001 and all(
          os.stat(p).st_mode & 0o001 for p in _parents(real)):
        return cand
  return sys.executable


def _parents(path: str):
  p = os.path.dirname(path)
  while p and p != "/":
    yield p
    p = os.path.dirname(p)


def workdir() -> str:
  """A fresh directory for one run. As root it lives outside /tmp, which the sandbox replaces
  by a private tmpfs ($PRORL_SANDBOX_DIR, default /var/lib/prorl_sandbox)."""
  if os.geteuid() != 0:
    return tempfile.mkdtemp(prefix="prorl_sbx_")
  base = os.environ.get("PRORL_SANDBOX_DIR", "/var/lib/prorl_sandbox")
  os.makedirs(base, mode=0o711, exist_ok=True)
  os.chmod(base, 0o711)
  return tempfile.mkdtemp(prefix="run_", dir=base)


def _sandbox_uid() -> int:
  return 60000 + os.getpid() % 5000  # distinct per concurrent verifier process


def _preexec(uid: int | None, report_fd: int, lim: dict):
  def fn():
    os.setsid()
    done = _try_isolate() if uid is not None else []
    os.write(report_fd, json.dumps(done).encode())
    os.close(report_fd)
    for res, val in ((resource.RLIMIT_CPU, lim["cpu_s"]), (resource.RLIMIT_AS, lim["mem_bytes"]),
                     (resource.RLIMIT_FSIZE, lim["fsize_bytes"]),
                     (resource.RLIMIT_NOFILE, lim["nofile"]), (resource.RLIMIT_CORE, 0),
                     (resource.RLIMIT_NPROC, lim["nproc"])):
      resource.setrlimit(res, (val, val))
    if uid is not None:
      os.setgroups([])
      os.setgid(uid)
      os.setuid(uid)
  return fn


def _kill_all_of(uid: int | None, pgid: int):
  try:
    os.killpg(pgid, signal.SIGKILL)
  except OSError:
    pass
  if uid is None:
    return
  # A helper that runs as the sandbox uid and kills every process that uid owns (escaped
  # children included). `user=`/`group=` switch ids in C, safe in a multithreaded parent.
  subprocess.run(["kill", "-KILL", "-1"], user=uid, group=uid, extra_groups=[], env={},
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def run_python(code: str, workdir: str, *, stdin: bytes, timeout_s: float, argv=(),
               files: dict[str, str] | None = None, limits: dict | None = None) -> dict:
  """Runs `code` as solution.py in `workdir` under the sandbox; returns stdout/stderr/status."""
  lim = dict(LIMITS, **(limits or {}))
  uid = _sandbox_uid() if os.geteuid() == 0 else None
  with open(os.path.join(workdir, "solution.py"), "w") as f:
    f.write(code)
  for name, text in (files or {}).items():
    with open(os.path.join(workdir, name), "w") as f:
      f.write(text)
  if uid is not None:
    os.chown(workdir, uid, uid)
    os.chmod(workdir, 0o700)
  script = "main.py" if files and "main.py" in files else "solution.py"
  out_path, err_path = os.path.join(workdir, ".stdout"), os.path.join(workdir, ".stderr")
  r_fd, w_fd = os.pipe()
  with open(out_path, "wb") as out, open(err_path, "wb") as err:
    t0 = time.time()
    proc = subprocess.Popen([sandbox_python(), "-I", script, *argv], cwd=workdir, env={},
                            stdin=subprocess.PIPE, stdout=out, stderr=err, close_fds=True,
                            pass_fds=(w_fd,), preexec_fn=_preexec(uid, w_fd, lim))
    os.close(w_fd)
    try:
      proc.communicate(stdin, timeout=timeout_s)
      timed_out = False
    except subprocess.TimeoutExpired:
      timed_out = True
    finally:
      _kill_all_of(uid, proc.pid)
      proc.wait()
  with os.fdopen(r_fd, "rb") as r:
    report = r.read()
  try:
    isolation = json.loads(report or b"[]")
  except ValueError:
    isolation = []
  with open(out_path, "rb") as f:
    stdout = f.read(1 << 20).decode("utf-8", "replace")
  with open(err_path, "rb") as f:
    stderr = f.read(1 << 16).decode("utf-8", "replace")
  return {"stdout": stdout, "stderr": stderr, "returncode": proc.returncode,
          "timed_out": timed_out, "seconds": time.time() - t0, "isolation": isolation}


def _same_output(got: str, want) -> bool:
  if isinstance(want, list):
    want = "\n".join(map(str, want))
  norm = lambda s: [line.rstrip() for line in str(s).strip().splitlines()]  # noqa: E731
  return norm(got) == norm(want)


def _fail_reason(res: dict) -> str:
  if res["timed_out"]:
    return "timeout"
  if "SyntaxError" in res["stderr"]:
    return "syntax error"
  if res["returncode"] and res["returncode"] < 0:
    return f"killed by signal {-res['returncode']}"
  last = res["stderr"].strip().splitlines()[-1:] or [f"exit {res['returncode']}"]
  return last[0][:120]


def score(response: str, reference, *, tests=None, time_budget_s: float = 5.0, **_) -> Score:
  """`tests` (or `reference`) is the item's test spec, a dict or its JSON string."""
  spec = tests if tests is not None else reference
  if isinstance(spec, str):
    try:
      spec = json.loads(spec)
    except ValueError:
      return Score(0.0, "test spec is not valid JSON", failed=True)
  if not isinstance(spec, dict) or "inputs" not in spec or "outputs" not in spec:
    return Score(0.0, "test spec needs 'inputs' and 'outputs'", failed=True)
  code = extract_code(response)
  if code is None:
    return Score(0.0, "no ```python block")
  n = len(spec["inputs"])
  if n == 0:
    return Score(0.0, "test spec has no tests", failed=True)
  passed, reasons, deadline = 0, [], time.time() + time_budget_s
  for inp, want in zip(spec["inputs"], spec["outputs"]):
    left = deadline - time.time()
    if left <= 0:
      reasons.append("timeout (total budget)")
      break
    d = workdir()
    try:
      if spec.get("fn_name"):
        res = run_python(code, d, stdin=b"", timeout_s=left, argv=(spec["fn_name"],),
                         files={"main.py": _HARNESS, "args.json": json.dumps(inp)})
        got = res["stdout"].rsplit("__RESULT__", 1)
        ok = len(got) == 2 and not res["timed_out"] and _json_equal(got[1], want)
      else:
        stdin = inp if isinstance(inp, str) else "\n".join(map(str, inp))
        res = run_python(code, d, stdin=stdin.encode(), timeout_s=left)
        ok = res["returncode"] == 0 and not res["timed_out"] and _same_output(res["stdout"], want)
    finally:
      shutil.rmtree(d, ignore_errors=True)
    passed += ok
    if not ok:
      reasons.append(_fail_reason(res) if res["returncode"] or res["timed_out"] else "wrong")
  reason = f"{passed}/{n} tests passed" + (f"; first failure: {reasons[0]}" if reasons else "")
  return Score(passed / n, reason)


def _json_equal(got: str, want) -> bool:
  try:
    val = json.loads(got)
  except ValueError:
    return False
  if isinstance(want, list) and len(want) == 1 and not isinstance(val, list):
    want = want[0]  # APPS wraps single return values in a list
  return val == want
