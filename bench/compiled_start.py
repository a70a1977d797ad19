"""What saved executables save at a run's start, on this host's CPU; prints JSON lines.

  python bench/compiled_start.py [--reps 3] [--steps 1]

`prorl-compile --topology=host --save DIR` compiles the demo's update, log-prob and reset
programs once; then the demo's smoke run (`configs/tiny.py:smoke`, `--steps` RL steps, its
warm-started base model cached) starts with `--config.compiled=DIR` and without it, the two
taking turns rep by rep, each in a new run directory and with no persistent XLA cache. Per arm:
the first step's seconds as the run logs them (it compiles its programs there, or loads them
before it) and the whole process's wall seconds (the loaded arm lowers its programs to check
their fingerprints at the start). The last line holds the medians and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION", "XLA_FLAGS"))}
ENV.update(JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)


def run(args: list[str]) -> tuple[float, str]:
  t0 = time.perf_counter()
  p = subprocess.run(args, cwd=ROOT, env=ENV, capture_output=True, text=True, check=False)
  if p.returncode:
    sys.exit(f"{' '.join(args)} failed:\n{(p.stdout + p.stderr)[-2000:]}")
  return time.perf_counter() - t0, p.stdout + p.stderr


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--steps", type=int, default=1)
  a = ap.parse_args()
  tmp = tempfile.mkdtemp(prefix="prorl-compiled-start-")
  flags = ["--config=configs/tiny.py:smoke", f"--config.total_steps={a.steps}"]
  saved = os.path.join(tmp, "compiled")
  compile_s, _ = run(
    [sys.executable, "-m", "prorl_jax.cli.compile", *flags, "--topology=host", f"--save={saved}"]
  )
  print(json.dumps({"compile_and_save_s": round(compile_s, 1)}), flush=True)
  arms = {"compiles": [], "loads": [f"--config.compiled={saved}"]}
  times = {name: {"first_step_s": [], "wall_s": []} for name in arms}
  for rep in range(a.reps):
    order = list(arms) if rep % 2 == 0 else list(arms)[::-1]
    for name in order:
      run_dir = os.path.join(tmp, f"{name}-{rep}")
      wall, out = run(
        [sys.executable, "-m", "prorl_jax.main", *flags, f"--config.run_dir={run_dir}", *arms[name]]
      )
      first = float(re.search(r"step 1/\d+ .*?\(([\d.]+) s/step", out).group(1))
      times[name]["first_step_s"].append(first)
      times[name]["wall_s"].append(wall)
      print(json.dumps({"arm": name, "rep": rep, "first_step_s": first, "wall_s": round(wall, 1)}))
  med = {n: {k: statistics.median(v) for k, v in t.items()} for n, t in times.items()}
  mins = {n: {k: min(v) for k, v in t.items()} for n, t in times.items()}
  print(
    json.dumps(
      {
        "median": med,
        "min": mins,
        "first_step_loads_vs_compiles": round(
          med["loads"]["first_step_s"] / med["compiles"]["first_step_s"], 3
        ),
        "wall_loads_vs_compiles": round(med["loads"]["wall_s"] / med["compiles"]["wall_s"], 3),
        "reps": a.reps,
      }
    )
  )


if __name__ == "__main__":
  main()
