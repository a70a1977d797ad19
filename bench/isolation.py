"""What confinement costs per response and domain: `pool.score_one` (a throw-away confined child:
fork, seccomp, rlimits, a JSON verdict; code: the bubblewrap sandbox) beside the same verifier
unconfined (called in-process; code: plain subprocesses), interleaved in one process (this process
plays the verifier pool process; both paths warmed first).

  python bench/isolation.py [--reps 7] [--items 40]

Per domain: milliseconds per response (min and median over `--reps` rounds of `--items`
responses), responses scored per second per core (`per_core_per_s`, from the median), and
`ratio` = confined / unconfined (median). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from prorl_jax import rewards  # noqa: E402
from prorl_jax.rewards import pool, puzzles  # noqa: E402
from prorl_jax.sandbox import confinement  # noqa: E402


def jobs(items: int) -> dict[str, list[tuple]]:
  rg = puzzles.make_items("basic_arithmetic", seed=0, size=items)
  return {
    "chain_sum": [("chain_sum", f"<answer>{i}</answer>", str(i), {}) for i in range(items)],
    "math": [
      ("math", f"<think>x</think>\\boxed{{\\frac{{{i}}}{{2}}}}", f"{i / 2}", {})
      for i in range(items)
    ],
    "reasoning_gym": [
      (
        "reasoning_gym",
        f"<answer>{r['reward_model']['ground_truth']}</answer>",
        None,
        {k: v for k, v in r["extra_info"].items() if k != "entry"},
      )
      for r in rg
    ],
    "ifeval": [
      (
        "ifeval",
        "a plain reply in lower case with no commas at all here",
        None,
        {"instructions": [{"type": "no_commas"}, {"type": "lowercase"}]},
      )
      for _ in range(items)
    ],
    "stem": [
      ("gpqa", "<think>x</think>**Answer: C**", "C", {})
      if i % 2
      else ("scp", f"<think>x</think>\\boxed{{{i}\\ \\text{{m/s}}}}", f"{i} m/s", {})
      for i in range(items)
    ],
    "code": [
      (
        "codecontests",
        f"<think>x</think>```python\nprint(int(input()) + {i + 1})\n```",  # + 0 would echo
        json.dumps({"inputs": ["1\n", "2\n"], "outputs": [f"{2 + i}\n", f"{3 + i}\n"]}),
        {},
      )
      for i in range(items)
    ],
  }


def in_process(job):
  d, r, ref, m = job
  name = rewards.verifier_name(d)
  if name == "code":  # the same programs as plain subprocesses, without the sandbox
    confinement.log.setLevel(logging.ERROR)  # its warning (said once per job here)
    confinement.allow_unsandboxed(True)
    try:
      return rewards.safe_score(rewards.route(d), r, ref, **m)
    finally:
      confinement.allow_unsandboxed(False)
  rewards.warm(name, ref, m)
  return rewards.safe_score(rewards.route(d), r, ref, **m)


def isolated(job):
  d, r, ref, m = job
  return pool.score_one(d, r, ref, m, None, 20.0)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--reps", type=int, default=7)
  ap.add_argument("--items", type=int, default=40)
  args = ap.parse_args()
  out = {}
  for name, js in jobs(args.items).items():
    for j in js[:2]:  # warm both paths (imports, generated puzzles)
      assert in_process(j).value == isolated(j).value == 1.0, (name, j)
    times = {"in_process": [], "isolated": []}
    for _ in range(args.reps):  # interleaved A/B rounds
      for label, fn in (("in_process", in_process), ("isolated", isolated)):
        t0 = time.perf_counter()
        got = [fn(j) for j in js]
        times[label].append(1000 * (time.perf_counter() - t0) / len(js))
        assert all(s.value == 1.0 for s in got), (name, label)
    row = {k: {"min_ms": min(v), "median_ms": statistics.median(v)} for k, v in times.items()}
    row["ratio"] = row["isolated"]["median_ms"] / row["in_process"]["median_ms"]
    row["extra_ms"] = row["isolated"]["median_ms"] - row["in_process"]["median_ms"]
    for k in ("in_process", "isolated"):  # one verifier process: one core
      row[k]["per_core_per_s"] = 1000.0 / row[k]["median_ms"]
    out[name] = row
    print(
      f"{name:14s} unconfined {row['in_process']['median_ms']:7.2f} ms "
      f"({row['in_process']['per_core_per_s']:7.0f}/s/core)  confined "
      f"{row['isolated']['median_ms']:7.2f} ms ({row['isolated']['per_core_per_s']:5.0f}/s/core)"
      f"  x{row['ratio']:.2f}"
    )
  print(json.dumps({"bench": "isolation", "reps": args.reps, "items": args.items, **out}))


if __name__ == "__main__":
  main()
