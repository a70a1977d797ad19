"""How a vLLM worker should apply a LoRA run's versions: merged into a copy of the base
(`vllm.lora=merge`) or as vLLM adapters (`vllm.lora=adapter`), measured on this machine's vLLM.

  .venv-vllm/bin/python bench/vllm_lora.py [--layers 0] [--rank 8] [--versions 3] [--rounds 2]
  .venv-vllm/bin/python bench/vllm_lora.py --smoke      # a tiny model, seconds

A version costs the worker two things: loading it (merge: the merge on the worker's CPU, the
merged copy written and reloaded in place; adapter: vLLM reads the PEFT directory) with the probe
check, and generating with it (adapter: every token pays the LoRA matmuls). The base (the ProRL
model's architecture, random weights in bfloat16, optionally fewer layers) and the versions
(random adapters of `--rank` on every projection, each with its probe) are written once through
the trainer's own writers; each arm then runs in its own process (vLLM holds process-wide state),
the arms taking turns round by round, and loads every version with `VllmEngine.load_adapted`
and generates `--prompts` x `--n` samples of `--max_new` tokens with it, as a worker does. The
first version of each process starts the engine and is reported apart.

Prints one JSON line per arm (load and generate seconds a version, min and median over every
version of every round; seconds a generated token), then a summary: the ratio adapter / merge of
each, and the tokens a version must generate on one engine for the merge to pay
(`break_even_tokens`: where the adapter's per-token overhead sums to the merge's extra load).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
ARMS = ("merge", "adapter")
PROBE = [[1, 5, 6, 7, 8, 9, 10], [1, 20, 21]]


def _base_model(args, root: str):
  """(model config, params): the demo's tiny base (`--smoke`), else the preset's architecture
  (with `--layers` layers) with random weights."""
  import jax

  from prorl_jax.demo import tiny_base
  from prorl_jax.model import init_params, load_hf, presets

  if args.smoke:
    return load_hf(tiny_base.build(os.path.join(root, "tiny")), dtype="float32")
  kw = {"num_layers": args.layers} if args.layers else {}
  model_cfg = presets.preset(args.preset)(**kw)
  return model_cfg, init_params(model_cfg, jax.random.PRNGKey(0))


def write_inputs(args, root: str) -> tuple[str, list[str]]:
  """The base model directory and the versions' directories, as the trainer writes them."""
  import jax
  import numpy as np

  from prorl_jax.model import lora, presets, save_hf
  from prorl_jax.rollout import adapters
  from prorl_jax.trainer.versions import write_probe

  model_cfg, params = _base_model(args, root)
  base = os.path.join(root, "base")
  save_hf(model_cfg, params, base, dtype=args.dtype)
  targets = presets.LORA_TARGETS
  adapted = model_cfg.replace(lora_rank=args.rank, lora_alpha=2.0 * args.rank, lora_targets=targets)
  config = adapters.peft_config(args.rank, 2.0 * args.rank, targets, args.preset)
  versions = []
  for v in range(args.versions + 1):
    rng = np.random.RandomState(v)
    fresh = jax.tree.map(
      lambda x: 0.02 * rng.standard_normal(x.shape).astype(np.float32),
      lora.init_adapters(adapted, jax.random.PRNGKey(v)),
    )
    tree = lora.with_adapters(params, fresh)
    out = os.path.join(root, f"v{v:08d}")
    adapters.write_version(out, lora.to_peft(adapted, lora.adapters(tree)), config, "base")
    write_probe(adapted, tree, PROBE, out)  # the adapted model's log-probs, as a LoRA run's
    versions.append(out)
  return base, versions


def child(args) -> dict:
  """One arm in this process: every version loaded and generated with."""
  from prorl_jax.records import SamplingParams
  from prorl_jax.rollout.engines.vllm import VllmEngine

  spec = json.loads(args.child)
  engine = VllmEngine(
    lora=spec["arm"], dtype=args.dtype, max_model_len=256, max_num_seqs=args.prompts * args.n
  )
  prompts = [[1] + [7 + (13 * i + j) % 50 for j in range(15)] for i in range(args.prompts)]
  sampling = SamplingParams(max_new_tokens=args.max_new, temperature=1.0)
  rows = []
  for i, vdir in enumerate(spec["versions"]):
    t0 = time.perf_counter()
    engine.load_adapted(spec["base"], vdir)
    t1 = time.perf_counter()
    gen = engine.generate(prompts, args.n, sampling, seed=i)
    t2 = time.perf_counter()
    rows.append(
      {
        "load_s": t1 - t0,
        "generate_s": t2 - t1,
        "tokens": int(gen.lengths.sum()),
        "probe_max": (engine.last_mismatch or {}).get("max"),
      }
    )
    shutil.rmtree(vdir + ".merged", ignore_errors=True)  # as the worker prunes a loaded copy
  engine.close()
  return {"arm": spec["arm"], "start": rows[0], "versions": rows[1:]}


def _run_child(args, arm: str, base: str, versions: list[str]) -> dict:
  spec = json.dumps({"arm": arm, "base": base, "versions": versions})
  argv = [sys.executable, os.path.abspath(__file__), "--child", spec] + _passthrough(args)
  env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", PYTHONPATH=ROOT)
  env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
  res = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
  if res.returncode:
    raise SystemExit(f"the {arm} arm failed:\n{res.stderr[-3000:]}")
  return json.loads(res.stdout.strip().splitlines()[-1])


def _passthrough(args) -> list[str]:
  keys = ("preset", "layers", "rank", "prompts", "n", "max_new", "dtype")
  return [f"--{k}={getattr(args, k)}" for k in keys] + (["--smoke"] if args.smoke else [])


def _stats(xs: list[float]) -> dict:
  return {"min": float(f"{min(xs):.4g}"), "median": float(f"{statistics.median(xs):.4g}")}


def summarize(results: dict[str, list[dict]]) -> list[dict]:
  """One line per arm and the summary (ratios, break-even tokens a version)."""
  lines, per = [], {}
  for arm, runs in results.items():
    rows = [r for run in runs for r in run["versions"]]
    load = [r["load_s"] for r in rows]
    per_token = [r["generate_s"] / max(r["tokens"], 1) for r in rows]
    per[arm] = (statistics.median(load), statistics.median(per_token))
    lines.append(
      {
        "arm": arm,
        "versions": len(rows),
        "start_s": _stats([run["start"]["load_s"] for run in runs]),
        "load_s": _stats(load),
        "generate_s": _stats([r["generate_s"] for r in rows]),
        "tokens_a_version": rows[0]["tokens"],
        "s_per_token": _stats(per_token),
        "probe_max": max(r["probe_max"] or 0.0 for r in rows),
      }
    )
  (lm, tm), (la, ta) = per["merge"], per["adapter"]
  extra_load, overhead = lm - la, ta - tm
  summary = {
    "summary": "adapter / merge (medians)",
    "load_ratio": round(la / lm, 3),
    "per_token_ratio": round(ta / tm, 3),
    # tokens one engine generates with a version beyond which merging is the faster
    "break_even_tokens": round(extra_load / overhead) if overhead > 0 and extra_load > 0 else None,
  }
  return lines + [summary]


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--preset", default="deepseek-r1-distill-qwen-1.5b")
  ap.add_argument("--layers", type=int, default=0, help="0: the preset's")
  ap.add_argument("--rank", type=int, default=8)
  ap.add_argument("--versions", type=int, default=3, help="timed versions per process")
  ap.add_argument("--rounds", type=int, default=2)
  ap.add_argument("--prompts", type=int, default=8)
  ap.add_argument("--n", type=int, default=4)
  ap.add_argument("--max_new", type=int, default=64)
  ap.add_argument("--dtype", default="bfloat16")
  ap.add_argument("--smoke", action="store_true")
  ap.add_argument("--child", default="", help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.child:
    print(json.dumps(child(args)))
    return
  if args.smoke:
    args.dtype, args.versions, args.rounds, args.max_new = "float32", 2, 1, 16
  with tempfile.TemporaryDirectory() as root:
    base, versions = write_inputs(args, root)
    results = {arm: [] for arm in ARMS}
    for r in range(args.rounds):  # the arms take turns: merge first, then adapter first
      for arm in ARMS if r % 2 == 0 else ARMS[::-1]:
        results[arm].append(_run_child(args, arm, base, versions))
  for line in summarize(results):
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
  main()
