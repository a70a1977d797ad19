"""The pipelined loop against the serial one on disjoint resources: the demo config with the
trainer pinned to CPU 0 and its rollout worker (an external worker on the run's exchange) to
CPU 1, one XLA thread each; serial and pipelined runs alternate, `--reps` of each; then the
default (serial, both processes on every CPU) for reference.

  python bench/pipeline.py [--steps 14] [--reps 2]

The base model is the demo's (warm-started, built once here), so dynamic sampling needs about as
many rounds as in `make demo`. Per run: seconds per step over the steps after the first two
(compilation excluded), the trainer's wait for rollouts g (generation it could not overlap) and
its update time u. The
ceiling of pipelining is (g_serial + u)/max(g_serial, u). The last line is one JSON object with
`pipelined_vs_serial` = steps per hour pipelined ÷ serial (medians).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def run(
  base: str,
  run_dir: str,
  steps: int,
  pipelined: bool,
  pinned: bool = False,
  flags: tuple = (),
  worker_env: dict | None = None,
) -> dict:
  """One run of the demo config (`flags` override it) with an external worker: its mean seconds
  per step after the first two, the trainer's wait for rollouts and its update time."""
  env = dict(os.environ, PYTHONPATH=ROOT)
  if pinned:
    env["XLA_FLAGS"] = ONE_THREAD
  args = [
    "--config=configs/tiny.py",
    f"--config.run_dir={run_dir}",
    f"--config.model.path={base}",
    f"--config.total_steps={steps}",
    "--config.rollout.local_workers=0",
    "--config.rollout.external_workers=1",
    "--config.eval.every=0",
    "--config.checkpoint.every=0",
    *flags,
  ]
  if pipelined:
    args += ["--config.rollout.pipeline=True", "--config.rollout.max_staleness=1"]
  cpu = lambda i: ["taskset", "-c", str(i)] if pinned else []  # noqa: E731
  trainer = subprocess.Popen(
    cpu(0) + [sys.executable, "-m", "prorl_jax.main", *args],
    cwd=ROOT,
    env=env,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.PIPE,
    text=True,
  )
  worker = subprocess.Popen(
    cpu(1)
    + [
      sys.executable,
      "-m",
      "prorl_jax.cli.worker",
      f"--exchange={run_dir}/exchange",
      "--engine=jax",
      "--poll_seconds=0.02",
    ],
    cwd=ROOT,
    env=dict(env, **(worker_env or {})),
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
  )
  try:
    _, err = trainer.communicate(timeout=3600)
  finally:
    worker.terminate()
    worker.wait(timeout=60)
  if trainer.returncode != 0:
    raise SystemExit(f"trainer failed: {err[-2000:]}")
  rows = [json.loads(x) for x in open(os.path.join(run_dir, "metrics.jsonl"))]
  rows = [r for r in rows if "time/step_s" in r and r["step"] > 2]
  step_s = statistics.mean(r["time/step_s"] for r in rows)
  return {
    "step_s": round(step_s, 3),
    "steps_per_hour": round(3600 / step_s, 1),
    "wait_rollouts_s": round(statistics.mean(r["time/wait_rollouts_s"] for r in rows), 3),
    "update_s": round(statistics.mean(r["time/update_s"] for r in rows), 3),
    "rounds": round(statistics.mean(r["sampling/rounds"] for r in rows), 2),
  }


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--steps", type=int, default=14)
  ap.add_argument("--reps", type=int, default=2)
  args = ap.parse_args()
  os.environ["JAX_PLATFORMS"] = "cpu"
  if len(os.sched_getaffinity(0)) < 2:
    raise SystemExit("needs 2 CPUs (one for the trainer, one for the worker)")
  from prorl_jax.demo import warm_start

  tmp = tempfile.mkdtemp(prefix="prorl_pipeline_bench_")
  t0 = time.time()
  base = warm_start.build(os.path.join(tmp, "base"), seed=0)  # the demo's warm-started base
  print(json.dumps({"base_build_s": round(time.time() - t0)}))
  runs = {"serial": [], "pipelined": []}
  for rep in range(args.reps):
    for mode in ("serial", "pipelined"):
      t0 = time.time()
      got = run(base, os.path.join(tmp, f"{mode}{rep}"), args.steps, mode == "pipelined", True)
      runs[mode].append(got)
      print(json.dumps({"mode": mode, "rep": rep, **got, "wall_s": round(time.time() - t0)}))
  default = run(base, os.path.join(tmp, "default"), args.steps, False, False)
  print(json.dumps({"mode": "default (serial, unpinned)", **default}))

  def med(mode, key):
    return statistics.median(r[key] for r in runs[mode])

  g, u = med("serial", "wait_rollouts_s"), med("serial", "update_s")
  out = {
    "bench": "pipeline",
    "date": time.strftime("%Y-%m-%d"),
    "steps": args.steps,
    "reps": args.reps,
    "serial_steps_per_hour": {
      "min": min(r["steps_per_hour"] for r in runs["serial"]),
      "median": med("serial", "steps_per_hour"),
    },
    "pipelined_steps_per_hour": {
      "min": min(r["steps_per_hour"] for r in runs["pipelined"]),
      "median": med("pipelined", "steps_per_hour"),
    },
    "default_steps_per_hour": default["steps_per_hour"],
    "generation_s_g": g,
    "update_s_u": u,
    "ceiling": round((g + u) / max(g, u, 1e-9), 2),
    "pipelined_vs_serial": round(
      med("pipelined", "steps_per_hour") / med("serial", "steps_per_hour"), 3
    ),
  }
  print(json.dumps(out))


if __name__ == "__main__":
  main()
