"""Fault injection: the tiny config run serially with a rollout worker, pipelined, and serially
with the trainer's inline engine, cut at random moments, resumed; every resumed run must end with
the uninterrupted run's metrics and final weights, bit for bit.

  python bench/faults.py [--cuts 50] [--modes serial,pipelined,inline] [--load both] [--steps 4]

Per mode, two uninterrupted reference runs (the first fills a persistent compilation cache, the
second must end identical to it and gives the warm wall time; validation every 2 steps, a
reference reset at step 3, a checkpoint every step); then `--cuts` runs, each cut once at a
moment drawn uniformly over the warm reference's wall time (so cuts land between the puts of a
prefetch, mid-publish, mid-save, mid-retire, during validation and during a reset) with one fault
drawn from:

  kill9        kill -9 of the trainer, then the same command again until it finishes
  sigterm      SIGTERM to the trainer (it must exit 75 with a checkpoint), then the same again
  worker_kill9 kill -9 of the local rollout worker (the trainer restarts it; no resume; not in
               the inline mode, which has no worker)
  torn         a request or result file of the exchange truncated to half (no resume)

The runs sample 32 responses a prompt, so dynamic sampling's last round of every step overshoots
what the step needs and every checkpoint holds carried-over groups: each cut falls after the run
first finishes a step with a non-empty buffer (`--anywhere`: anywhere in the run), each cut's
`buffer_at_cut` says how many groups the run had carried over when the fault struck, and a cut
with none fails the run.
`--load on` runs a CPU-bound spinner beside every cut run; `both` alternates quiet and loaded
cuts so that each fault meets both conditions within every two rounds of the mode's faults (8
cuts; 6 inline). A wait for rollouts longer than the exchange's lease (60 s) plus a 30 s margin
counts as a failure. The last
line is one JSON object: cut points tried and survived (per fault and load), the slowest
recovery (the resumed run's longest wait for rollouts) and each failure; the exit status is 1
if any cut failed. A run that finishes before its cut (or before it has a worker to kill or a
file to tear) counts as missed: tried, but not a cut point. `make test-faults` is the short mode
(2 cuts per mode, 3 steps).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from prorl_jax.rollout.queue import LEASE_SECONDS as LEASE_S  # noqa: E402
from prorl_jax.trainer.preemption import REQUEUE_EXIT  # noqa: E402
from tests import loop_helpers  # noqa: E402 - the loop tests' run settings and comparisons

FAULTS = ("kill9", "sigterm", "worker_kill9", "torn")
MODES = ("serial", "pipelined", "inline")
MARGIN_S = 30.0
MISSED = "finished before the cut"  # such a run counts as tried, not as a cut point
# The competing process: busy until its parent (this harness) is gone, so that a harness
# stopped by a signal leaves no spinner behind to load the next run.
SPIN = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n  pass"
CACHE_DIR = os.path.join(tempfile.gettempdir(), f"prorl_jax-faults-xla-cache-{os.getuid()}")


def faults(mode: str) -> tuple[str, ...]:
  """The faults a mode can meet (the inline engine runs in the trainer: no worker to kill)."""
  return tuple(f for f in FAULTS if not (mode == "inline" and f == "worker_kill9"))


def flags(run_dir: str, base: str, steps: int, mode: str) -> list[str]:
  """The loop tests' tiny run, with validation, a reference reset and checkpoints kept."""
  extra = {
    "checkpoint.keep": 20,
    "checkpoint.grace_s": 60.0,
    "eval.every": 2,
    "eval.heldout": 16,
    "algo.ref_reset_every": 3,
    "algo.kl_coef": 0.01,
    # 32 samples a prompt: enough informative groups that every step's last round overshoots
    # what it needs, so every checkpoint holds carried-over groups (a resume must restore them)
    "rollout.n": 32,
  }
  if mode == "pipelined":
    extra.update({"rollout.pipeline": True, "rollout.max_staleness": 1})
  elif mode == "inline":
    extra["rollout.engine"] = "inline"
  return loop_helpers.flags(run_dir, base, steps, **extra)


def start(run_dir: str, base: str, steps: int, mode: str) -> subprocess.Popen:
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  # Every run after the first loads its executables from one persistent compilation cache, so
  # a cut run's wall time is the warm one the cut moments are drawn over.
  env.setdefault("JAX_COMPILATION_CACHE_DIR", CACHE_DIR)
  cmd = [sys.executable, "-m", "prorl_jax.main", "--config=configs/tiny.py"]
  return subprocess.Popen(
    cmd + flags(run_dir, base, steps, mode),
    cwd=ROOT,
    env=env,
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
  )


def rows(run_dir: str) -> list[dict]:
  path = os.path.join(run_dir, "metrics.jsonl")
  return [json.loads(x) for x in open(path)] if os.path.exists(path) else []


def outcome(run_dir: str) -> tuple[list[dict], tuple[str, str]]:
  """(metrics without the volatile keys, the newest published weights' version and sha256)."""
  return loop_helpers.metrics(run_dir), loop_helpers.params_hash(run_dir)


def buffer_now(run_dir: str) -> int | None:
  """Groups carried over by the last step the run has finished (None before its first)."""
  done = [r for r in rows(run_dir) if "sampling/buffer" in r]
  return int(done[-1]["sampling/buffer"]) if done else None


def carry_windows(run_dir: str, t0: float) -> list[tuple[float, float]]:
  """Seconds after `t0` during which the run's newest checkpoint held carried-over groups: from
  a step that ended with a non-empty buffer to the end of the next one."""
  done = [r for r in rows(run_dir) if "sampling/buffer" in r and "time/clock" in r]
  return [
    (a["time/clock"] - t0, b["time/clock"] - t0)
    for a, b in zip(done, done[1:])
    if a["sampling/buffer"] > 0
  ]


def longest_wait(run_dir: str) -> float:
  return max((r.get("time/wait_rollouts_s", 0.0) for r in rows(run_dir)), default=0.0)


def tear(run_dir: str, rng: random.Random) -> str:
  """Truncates one request or result file of the run's exchange to half; what it tore."""
  ex = os.path.join(run_dir, "exchange")
  files = []
  for sub in ("requests", "results"):
    for d, _, names in os.walk(os.path.join(ex, sub)):
      files += [os.path.join(d, n) for n in names]
  if not files:
    return ""
  path = rng.choice(sorted(files))
  try:
    with open(path, "rb") as f:
      data = f.read()
    with open(path, "wb") as f:
      f.write(data[: len(data) // 2])
  except OSError:
    return ""
  return os.path.relpath(path, ex)


def kill_worker(run_dir: str) -> bool:
  out = subprocess.run(
    ["pgrep", "-f", f"worker_id=local0.*{run_dir}|{run_dir}.*worker_id=local0"],
    capture_output=True,
    text=True,
  ).stdout.split()
  for pid in out:
    try:
      os.kill(int(pid), signal.SIGKILL)
    except ProcessLookupError:
      pass
  return bool(out)


def finish(proc: subprocess.Popen, timeout: float = 900) -> tuple[int, str]:
  out = proc.communicate(timeout=timeout)[0]
  return proc.returncode, out


def one_cut(base, run_dir, steps, mode, fault, at_s, rng, carried=False) -> dict:
  """One cut run: the fault `at_s` seconds in (`carried`: `at_s` after the run first finishes
  a step that carries groups over), then resumes until the run finishes."""
  proc = start(run_dir, base, steps, mode)
  while carried and not buffer_now(run_dir) and proc.poll() is None:
    time.sleep(0.02)
  t0 = time.time()
  while time.time() - t0 < at_s and proc.poll() is None:
    time.sleep(0.02)
  note, starts = MISSED, 1
  if proc.poll() is None:
    if fault == "kill9":
      proc.kill()
      note = ""
    elif fault == "sigterm":
      proc.send_signal(signal.SIGTERM)
      note = ""
    else:  # the first moment from `at_s` on when there is a worker to kill or a file to tear
      while proc.poll() is None:
        if fault == "worker_kill9" and kill_worker(run_dir):
          note = "worker killed"
          break
        if fault == "torn" and (torn := tear(run_dir, rng)):
          note = torn
          break
        time.sleep(0.05)
  buffered = buffer_now(run_dir)  # what the run had carried over when the fault struck
  code, out = finish(proc)
  if fault in ("worker_kill9", "torn") and code != 0:  # the run must get over these by itself
    return {"ok": False, "why": f"{fault} ({note}): exit {code}: {out[-400:]}"}
  if fault == "sigterm" and code not in (0, REQUEUE_EXIT):
    return {"ok": False, "why": f"SIGTERM exit {code}: {out[-400:]}"}
  if fault == "sigterm" and code == REQUEUE_EXIT:
    stopped = json.load(open(os.path.join(run_dir, "stopped.json")))
    if stopped["stop_s"] > 60:
      return {"ok": False, "why": f"SIGTERM save took {stopped['stop_s']} s"}
    pending = " (tail pending)" if stopped.get("pending_tail") else ""
    note = f"stopped at {stopped['stopped_at']}{pending}"
  while not os.path.exists(os.path.join(run_dir, "summary.json")):
    if starts > 3:
      return {"ok": False, "why": f"not finished after {starts} starts: {out[-400:]}"}
    code, out = finish(start(run_dir, base, steps, mode))
    starts += 1
    if code != 0:
      return {"ok": False, "why": f"resume exit {code}: {out[-400:]}"}
  return {
    "ok": True,
    "note": note,
    "starts": starts,
    "wait_s": longest_wait(run_dir),
    "buffer_at_cut": buffered,
  }


def judged(got: dict, same_outcome: bool) -> dict:
  """A cut run's verdict by the harness's rules: a resumed run must end identical to the
  uninterrupted one (metrics and weights) and no wait may pass the lease plus a margin."""
  if got["ok"] and not same_outcome:
    return {"ok": False, "why": "resumed run differs from the reference (metrics or weights)"}
  if got["ok"] and got["wait_s"] > LEASE_S + MARGIN_S:
    return {"ok": False, "why": f"a wait of {got['wait_s']:.0f} s"}
  return got


def exit_code(failures: list, buffers: list[int], anywhere: bool) -> int:
  """1 when any cut failed, or (unless `anywhere`) when no cut landed or one landed while the
  run carried no groups over (the cut the harness exists to test did not happen), else 0."""
  empty = not anywhere and (not buffers or min(buffers) == 0)
  return 1 if failures or empty else 0


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--cuts", type=int, default=50, help="cut points per mode")
  p.add_argument("--modes", default=",".join(MODES))
  p.add_argument("--load", choices=("off", "on", "both"), default="both")
  p.add_argument("--steps", type=int, default=4)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--base", default="", help="a built base model (default: built here)")
  p.add_argument(
    "--anywhere",
    action="store_true",
    help="cut anywhere in the run, not only while the last checkpoint holds carried-over groups",
  )
  args = p.parse_args()
  rng = random.Random(args.seed)
  tmp = tempfile.mkdtemp(prefix="faults-")
  base = args.base
  if not base:
    from prorl_jax.demo import warm_start

    base = warm_start.build(os.path.join(tmp, "base"), steps=60)
  tried, survived, missed = collections.Counter(), collections.Counter(), collections.Counter()
  failures, slowest, buffers = [], 0.0, []
  for mode in args.modes.split(","):
    if mode not in MODES:
      p.error(f"--modes: unknown mode {mode!r}; choose from {', '.join(MODES)}")
    kinds = faults(mode)
    # Two uninterrupted runs: the first fills the compilation cache, the second (warm, like every
    # cut run) gives the wall time the cuts are drawn over; both must end the same.
    for k in range(2):
      ref = os.path.join(tmp, f"{mode}-ref{k}")
      t0 = time.time()
      code, out = finish(start(ref, base, args.steps, mode))
      assert code == 0, out[-3000:]
      ref_s = time.time() - t0
      if k == 0:
        want = outcome(ref)
      else:
        assert outcome(ref) == want, f"{mode}: two uninterrupted runs differ ({tmp})"
        windows = [] if args.anywhere else carry_windows(ref, t0)
      line = {"mode": mode, "reference": k, "wall_s": round(ref_s, 1)}
      line["buffer_by_step"] = [
        int(r["sampling/buffer"]) for r in rows(ref) if "sampling/buffer" in r
      ]
      print(json.dumps(line), flush=True)
    for i in range(args.cuts):
      fault = kinds[i % len(kinds)]
      # `both`: quiet and loaded cuts alternate, and each fault meets both conditions within
      # every two rounds of the mode's faults (the flip each round shifts which faults load)
      n = len(kinds)
      load = args.load == "on" or (args.load == "both" and (i % n + i // n) % 2 == 1)
      # cut after the first step that carries groups over (anywhere: within the run)
      at_s = rng.uniform(0, sum(b - a for a, b in windows)) if windows else rng.uniform(0.1, ref_s)
      run_dir = os.path.join(tmp, f"{mode}-{i:03d}")
      spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if load else None
      try:
        got = one_cut(base, run_dir, args.steps, mode, fault, at_s, rng, bool(windows))
      finally:
        if spinner:
          spinner.kill()
          spinner.wait()
      key = f"{mode}/{fault}/{'load' if load else 'quiet'}"
      tried[key] += 1
      got = judged(got, got["ok"] and outcome(run_dir) == want)
      if got.get("note") == MISSED:
        missed[key] += 1
      elif got["ok"]:
        survived[key] += 1
        slowest = max(slowest, got["wait_s"])
        buffers.append(got["buffer_at_cut"] or 0)
      else:
        failures.append({"cut": key, "at_s": round(at_s, 2), "dir": run_dir, "why": got["why"]})
      line = {"cut": key, "at_s": round(at_s, 2), **{k: v for k, v in got.items() if k != "ok"}}
      print(json.dumps(dict(line, ok=got["ok"])), flush=True)
  print(
    json.dumps(
      {
        "runs": sum(tried.values()),
        "missed": sum(missed.values()),
        "cut_points": sum(tried.values()) - sum(missed.values()),
        "survived": sum(survived.values()),
        "by_cut": {k: f"{survived[k]}/{n - missed[k]}" for k, n in sorted(tried.items())},
        "slowest_recovery_wait_s": round(slowest, 2),
        "buffer_at_cut_min": min(buffers, default=None),
        "cuts_with_empty_buffer": sum(b == 0 for b in buffers),
        "failures": failures,
        "steps": args.steps,
        "seed": args.seed,
      }
    )
  )
  sys.exit(exit_code(failures, buffers, args.anywhere))


if __name__ == "__main__":
  main()
