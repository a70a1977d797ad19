"""The code-reward sandbox's cost: bubblewrap runs beside unsandboxed runs and the earlier
verifier (a per-run network namespace, no PID/user/mount isolation), interleaved in one process.

  python bench/sandbox.py [--reps 30] [--baseline_rev 171b01a]

Per program: wall seconds of one bare run (`python -I -S` as a plain subprocess, no limits),
of the earlier verifier's `run_python` (loaded from git at `--baseline_rev`), and of the
bubblewrap sandbox (`sandbox.run`); an overhead is a median minus the bare median. Then a
16-answer group of code responses (4 stdin/stdout tests each) scored by the earlier
`code.score` and by today's, interleaved; `group_ratio` = today ÷ earlier (median). The last
line is one JSON object.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from prorl_jax import sandbox  # noqa: E402
from prorl_jax.rewards import code  # noqa: E402

PROGRAMS = {
  "sum_stdin": ("import sys\nprint(sum(map(int, sys.stdin.read().split())))", b"1 2 3\n"),
  "loop_1e5": ("s = 0\nfor i in range(100000):\n  s += i * i % 7\nprint(s)", b""),
  "imports": ("import collections, heapq, itertools, math, re, bisect\nprint(math.pi)", b""),
}


def load_baseline(rev: str):
  """The earlier prorl_jax.rewards.code module, from git (nothing of it is kept in the tree)."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  try:
    src = subprocess.run(
      ["git", "-C", root, "show", f"{rev}:prorl_jax/rewards/code.py"],
      capture_output=True,
      text=True,
      check=True,
    ).stdout
  except (OSError, subprocess.CalledProcessError) as e:
    raise SystemExit(
      f"bench/sandbox.py: cannot read the baseline from git at {rev} ({e}); run "
      "it in a clone with history or pass --baseline_rev"
    ) from None
  d = tempfile.mkdtemp(prefix="prorl-bench-")
  path = os.path.join(d, "baseline_code.py")
  with open(path, "w") as f:
    f.write(src)
  spec = importlib.util.spec_from_file_location("baseline_code", path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  shutil.rmtree(d)
  return mod


def _timed(fn) -> float:
  t0 = time.perf_counter()
  fn()
  return time.perf_counter() - t0


def run_bare(src, stdin):
  res = subprocess.run(
    [sandbox.python(), "-I", "-S", "-c", src],
    input=stdin,
    capture_output=True,
    timeout=30,
    check=False,
  )
  assert res.returncode == 0, res


def run_baseline(base, src, stdin):
  d = base.workdir()
  try:
    res = base.run_python(src, d, stdin=stdin, timeout_s=30)
  finally:
    shutil.rmtree(d, ignore_errors=True)
  assert res["returncode"] == 0, res


def run_sandboxed(src, stdin):
  res = sandbox.run(src, stdin=stdin, timeout_s=30)
  assert res.ok, res


def group(score_fn):
  """16 responses to one task with 4 tests: 12 correct, 4 wrong (as a policy's group is)."""
  tests = {
    "inputs": [f"{i} {i + 1}\n" for i in range(4)],
    "outputs": [f"{2 * i + 1}\n" for i in range(4)],
  }
  good = "```python\nimport sys\nprint(sum(map(int, sys.stdin.read().split())))\n```"
  bad = "```python\nprint(0)\n```"
  for k in range(16):
    s = score_fn(good if k % 4 else bad, json.dumps(tests))
    assert s.value == (1.0 if k % 4 else 0.0), s


def stats(xs):
  return {"min_ms": round(1e3 * min(xs), 2), "median_ms": round(1e3 * statistics.median(xs), 2)}


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--reps", type=int, default=30)
  ap.add_argument("--group_reps", type=int, default=5)
  ap.add_argument("--baseline_rev", default="171b01a")
  args = ap.parse_args()
  err = sandbox.check()
  if err:
    raise SystemExit(err)
  base = load_baseline(args.baseline_rev)
  out = {"date": time.strftime("%Y-%m-%d"), "reps": args.reps, "programs": {}}
  for name, (src, stdin) in PROGRAMS.items():
    t = {"bare": [], "baseline": [], "bwrap": []}
    for _ in range(2):  # warm-up: page cache, interpreter files
      run_bare(src, stdin)
      run_baseline(base, src, stdin)
      run_sandboxed(src, stdin)
    for _ in range(args.reps):  # interleaved, so machine noise hits all three alike
      t["bare"].append(_timed(lambda: run_bare(src, stdin)))
      t["baseline"].append(_timed(lambda: run_baseline(base, src, stdin)))
      t["bwrap"].append(_timed(lambda: run_sandboxed(src, stdin)))
    row = {k: stats(v) for k, v in t.items()}
    med = {k: statistics.median(v) for k, v in t.items()}
    row["bwrap_overhead_ms"] = round(1e3 * (med["bwrap"] - med["bare"]), 2)
    row["baseline_overhead_ms"] = round(1e3 * (med["baseline"] - med["bare"]), 2)
    out["programs"][name] = row
    print(name, json.dumps(row), flush=True)
  g = {"baseline": [], "bwrap": []}
  group(base.score)
  group(code.score)
  for _ in range(args.group_reps):
    g["baseline"].append(_timed(lambda: group(base.score)))
    g["bwrap"].append(_timed(lambda: group(code.score)))
  out["group16"] = {k: stats(v) for k, v in g.items()}
  out["group_ratio"] = round(statistics.median(g["bwrap"]) / statistics.median(g["baseline"]), 3)
  out["max_overhead_ms"] = max(r["bwrap_overhead_ms"] for r in out["programs"].values())
  print(json.dumps(out))


if __name__ == "__main__":
  main()
