"""The real run compiled for TPU slices and GPU nodes on this host (`prorl-compile`), as tables.

  python bench/chips.py --out DIR            # compile the matrix below, one JSONL file a case
  python bench/chips.py --out DIR --tables   # only print the Markdown tables of DIR's files

Each case is `python -m prorl_jax.cli.compile --config=configs/qwen15b.py` with a preset model,
a topology and the rollout engine (vllm: the update and log-prob programs; inline: the JAX
engine's too), with `--fit` where it may not fit. Every time figure is a roofline estimate from
the chip's published peak numbers (`parallel/chips.py`), never a measurement; the memory figures
are the compiler's own analysis of each program for that chip.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
M15, M7 = "deepseek-r1-distill-qwen-1.5b", "deepseek-r1-distill-qwen-7b"
CASES = [  # (name, model, topology, engine, extra flags)
  ("15-v5p-8", M15, "v5p-8", "vllm", []),
  ("15-v5p-8-inline", M15, "v5p-8", "inline", []),
  ("15-v5e-16", M15, "v5e-16", "vllm", ["--fit"]),
  ("15-v5e-16-inline", M15, "v5e-16", "inline", ["--fit"]),
  ("15-v6e-8", M15, "v6e-8", "vllm", []),
  ("15-v6e-8-inline", M15, "v6e-8", "inline", ["--fit"]),
  ("15-v5p-64", M15, "v5p-64", "vllm", []),
  ("15-h200-8", M15, "h200-8", "vllm", []),
  ("15-h200-8-inline", M15, "h200-8", "inline", []),
  ("7-v5p-8", M7, "v5p-8", "vllm", ["--fit"]),
  ("7-v5p-16", M7, "v5p-16", "vllm", ["--fit"]),
  ("7-v5p-64", M7, "v5p-64", "vllm", ["--fit"]),
  ("7-v5e-16", M7, "v5e-16", "vllm", ["--fit"]),
  ("7-v6e-8", M7, "v6e-8", "vllm", ["--fit"]),
  ("7-h100-8", M7, "h100-8", "vllm", ["--fit"]),
  ("7-h200-8", M7, "h200-8", "vllm", ["--fit"]),
  ("7-v5p-16-inline", M7, "v5p-16", "inline", ["--fit"]),
  ("7-v5p-64-inline", M7, "v5p-64", "inline", ["--fit"]),
  ("7-h100-8-inline", M7, "h100-8", "inline", ["--fit"]),
]
GB = 1e9


def run_case(out: str, name: str, model: str, topology: str, engine: str, extra: list) -> None:
  cmd = [sys.executable, "-m", "prorl_jax.cli.compile", "--config=configs/qwen15b.py"]
  cmd += [f"--topology={topology}", f"--config.model.path={model}"]
  cmd += [f"--config.rollout.engine={engine}", *extra]
  t0 = time.perf_counter()
  p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
  with open(os.path.join(out, f"{name}.jsonl"), "w") as f:
    f.write(p.stdout)
  print(json.dumps({"case": name, "exit": p.returncode, "wall_s": round(time.perf_counter() - t0)}))


def _read(path: str) -> tuple[list[dict], dict, dict | None]:
  lines = [json.loads(x) for x in open(path) if x.startswith("{")]
  progs = [ln for ln in lines if "program" in ln]
  last = next(ln for ln in lines if "topology" in ln)
  fit = next((ln["fit"] for ln in lines if "fit" in ln), None)
  return progs, last, fit


def tables(out: str) -> str:
  """A summary row per case, then a row per program of every case."""
  rows = [
    "| model | topology | engine | fits | peak GB/chip (program) | HBM GB | train tok/s/chip: "
    "expected (bound) | decode tok/s/chip (bound) | s/step: expected (bound) | MFU assumed | "
    "--fit |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  detail = [
    "| case | program | fits | peak GB | temp GB | compile s | roofline ms (est.) | attention "
    "| kernels |",
    "|---|---|---|---|---|---|---|---|---|",
  ]
  for name, model, topology, engine, _ in CASES:
    path = os.path.join(out, f"{name}.jsonl")
    if not os.path.isfile(path):
      continue
    progs, last, fit = _read(path)
    top = max(progs, key=lambda ln: ln["peak_bytes_per_chip"] or 0)
    est = last["estimate"]
    exp = est["expected"]
    fix = "-" if last["fits"] else " ".join(f"{k}={v}" for k, v in (fit or {}).items()) or "none"
    rows.append(
      f"| {model.split('-')[-1]} | {topology} | {engine} | {'yes' if last['fits'] else 'no'} | "
      f"{top['peak_bytes_per_chip'] / GB:.1f} ({top['program']}) | "
      f"{top['hbm_bytes_per_chip'] / GB:.1f} | "
      f"{_pair(exp, est, 'train_tokens_per_s_per_chip')} | "
      f"{_fmt(est['decode_tokens_per_s_per_chip'])} | {_pair(exp, est, 'step_s')} | "
      f"{exp['mfu']:.3f} | {fix} |"
    )
    for ln in progs:
      k = ", ".join(f"{n}: {c}" for n, c in ln["kernels"].items())
      peak = "-" if ln["peak_bytes_per_chip"] is None else f"{ln['peak_bytes_per_chip'] / GB:.1f}"
      detail.append(
        f"| {name} | {ln['program']} | {ln['fits']} | {peak} | {ln['temp_bytes'] / GB:.2f} | "
        f"{ln['compile_s']:.1f} | {ln['roofline_s_estimate'] * 1e3:.1f} | "
        f"{ln.get('attention') or '-'} | {k} |"
      )
  return "\n".join(rows) + "\n\n" + "\n".join(detail)


def _fmt(v) -> str:
  return "-" if v is None else f"{v:,.0f}"


def _pair(expected: dict, bound: dict, key: str) -> str:
  """A figure as "expected (bound)": the expected is "-" where it is not known (decode)."""
  return f"{_fmt(expected[key])} ({_fmt(bound[key])})"


README_CASES = ["15-v5p-8", "15-v5e-16", "15-v6e-8", "15-v5p-64", "15-h200-8",
                "7-v5p-8", "7-v5e-16", "7-v6e-8", "7-v5p-64", "7-h200-8"]  # fmt: skip


def readme_table(out: str) -> str:
  """The README's table: per model and topology (the vLLM layout), the peak GB per chip of each
  program, whether all fit (or the --fit setting), and the roofline estimates."""
  rows = [
    "| model | chips | GB/chip: log-prob / update / apply / reset | trainer's HBM GB | fits "
    "| train tok/s/chip: expected (bound) | update + log-probs s/step: expected (bound) |",
    "|---|---|---|---|---|---|---|",
  ]
  for name in README_CASES:
    path = os.path.join(out, f"{name}.jsonl")
    if not os.path.isfile(path):
      continue
    progs, last, found = _read(path)
    peaks = " / ".join(f"{ln['peak_bytes_per_chip'] / GB:.1f}" for ln in progs)
    fits = "yes" if last["fits"] else (
      "with " + " ".join(f"{k}={v}" for k, v in found.items() if k != "rollout.pack_row_len")
      if found else "no"
    )  # fmt: skip
    est = last["estimate"]
    rows.append(
      f"| {'1.5B' if name.startswith('15') else '7B'} | {last['topology']} | {peaks} | "
      f"{progs[0]['hbm_bytes_per_chip'] / GB:.1f} | {fits} | "
      f"{_pair(est['expected'], est, 'train_tokens_per_s_per_chip')} | "
      f"{_pair(est['expected'], est, 'step_s')} |"
    )
  return "\n".join(rows)


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--out", required=True)
  ap.add_argument("--tables", action="store_true", help="only print the tables of --out's files")
  ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
  ap.add_argument("--readme", action="store_true", help="print the README's table instead")
  a = ap.parse_args()
  if not a.tables:
    os.makedirs(a.out, exist_ok=True)
    wanted = set(a.cases.split(",")) if a.cases else None
    for case in CASES:
      if wanted is None or case[0] in wanted:
        run_case(a.out, *case)
  print(readme_table(a.out) if a.readme else tables(a.out))


if __name__ == "__main__":
  main()
