"""Continuous batching over a paged KV cache vs the static-batch sampler, on ProRL-shaped lengths.

  python bench/engine.py [--reps=3] [--prompts=64] [--samples=8] [--slots=64]

The same random 4.5M-parameter Qwen2 as bench/sampler.py; 64 prompts x 8 samples whose prompt
and response lengths are drawn from the distribution bench/packing.py uses (lognormal, median
~2,000 tokens, 7% truncated at the 8,192 cap; scaled down 16x for the CPU: cap 512). Each row
stops at its drawn length (a per-row token limit, the same in both engines), so both generate
exactly the same tokens' worth of work: the static sampler as one batch of every row (what the
JAX worker does with a request), the continuous engine through its slots. Timed in turns in one
process (`--reps` calls each, after a warm-up call): generated tokens per second, best and
median, and the ratio of the medians. Also: KV memory, allocated against allocated (the static
cache is every row at the longest length; the paged one its page pool), and the paged pool's
peak pages in use; vLLM-CPU on the same rows (each
its own request with its drawn token limit, prefix caching on; in .venv-vllm, after the
in-process arms; skipped without it or with --novllm); and the decode step of each engine on
bench/sampler.py's short workload (8 rows x 128 new tokens, where attention is small) beside the
same step's weight matmuls alone in torch, timed in turns.

One JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchutil import interleaved, spread  # noqa: E402
from packing import SCALE, lengths  # noqa: E402
from sampler import NEW, PROMPT, B, make_model, torch_matmuls  # noqa: E402

CAP = 8192 // SCALE


VLLM_CHILD = """
import json, os, sys, time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
if __name__ == "__main__":
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    path, spec = sys.argv[1], json.load(open(sys.argv[2]))
    rows, caps = spec["rows"], spec["caps"]
    llm = LLM(model=path, skip_tokenizer_init=True, dtype="float32", seed=0,
              max_model_len=max(map(len, rows)) + max(caps) + 16, enforce_eager=True,
              enable_prefix_caching=True)
    sps = [SamplingParams(temperature=1.0, max_tokens=c, min_tokens=c, logprobs=0, seed=i,
                          detokenize=False) for i, c in enumerate(caps)]
    prompts = [TokensPrompt(prompt_token_ids=p) for p in rows]
    llm.generate(prompts[:16], sps[:16], use_tqdm=False)  # warm-up
    t0 = time.perf_counter()
    outs = llm.generate(prompts, sps, use_tqdm=False)
    dt = time.perf_counter() - t0
    print("RESULT", sum(len(o.outputs[0].token_ids) for o in outs), dt)
"""


def vllm_tokens_per_s(path, rows, caps):
  """vLLM-CPU's generated tokens per second on `rows` (each its own request, stopping at its
  cap), in .venv-vllm; None when that environment is missing or vLLM fails (its error printed)."""
  import subprocess
  import tempfile

  py = os.path.join(ROOT, ".venv-vllm", "bin", "python")
  if not os.path.isfile(py):
    return None
  with tempfile.TemporaryDirectory() as tmp:
    child, spec = os.path.join(tmp, "child.py"), os.path.join(tmp, "rows.json")
    with open(child, "w") as f:
      f.write(VLLM_CHILD)
    with open(spec, "w") as f:
      json.dump({"rows": rows, "caps": [int(c) for c in caps]}, f)
    res = subprocess.run([py, child, path, spec], capture_output=True, text=True, timeout=3600)
  for line in res.stdout.splitlines():
    if line.startswith("RESULT"):
      tokens, secs = line.split()[1:]
      assert int(tokens) == int(sum(caps)), (tokens, sum(caps))  # the same work
      return int(tokens) / float(secs)
  print(json.dumps({"vllm_error": res.stderr.strip().splitlines()[-3:]}), flush=True)
  return None


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--prompts", type=int, default=64)
  ap.add_argument("--samples", type=int, default=8)
  ap.add_argument("--slots", type=int, default=64)
  ap.add_argument("--page_size", type=int, default=16)
  ap.add_argument("--steps_per_sync", type=int, default=16)
  ap.add_argument("--novllm", action="store_true", help="skip the vLLM-CPU column")
  args = ap.parse_args()
  import tempfile

  import numpy as np

  from prorl_jax.records import SamplingParams
  from prorl_jax.rollout.engines import jax_sampler
  from prorl_jax.rollout.engines.paged import PagedConfig, PagedEngine

  tmp = tempfile.TemporaryDirectory()
  path = os.path.join(tmp.name, "model")
  model_cfg, params = make_model(path)  # the HF directory vLLM and torch read
  rng = np.random.RandomState(0)
  rows = args.prompts * args.samples
  p_len, _ = lengths(rng, args.prompts)
  _, r_len = lengths(rng, rows)
  prompts = [[int(t) for t in rng.randint(1, model_cfg.vocab_size, size=n)] for n in p_len]
  caps = np.minimum(r_len, CAP).astype(np.int32)
  sp = SamplingParams(max_new_tokens=CAP, temperature=1.0)
  weights = jax_sampler.prepare(model_cfg, params)
  engine = PagedEngine(
    model_cfg,
    params,
    PagedConfig(slots=args.slots, page_size=args.page_size, steps_per_sync=args.steps_per_sync),
    weights=weights,
  )
  expanded = [p for p in prompts for _ in range(args.samples)]
  got = {}

  def static():
    got["static"] = jax_sampler.generate(
      model_cfg, params, expanded, sp, seed=0, weights=weights, max_new=caps
    )

  def continuous():
    got["continuous"] = engine.generate(prompts, args.samples, sp, seed=0, max_new=caps)

  times = interleaved({"static": static, "continuous": continuous}, reps=args.reps)
  tokens = int(caps.sum())
  for name in got:
    assert int(got[name].lengths.sum()) == tokens, name  # the same work in both
  med = {k: statistics.median(v) for k, v in times.items()}
  decode_steps = engine.stats.decode_steps

  # The decode step where attention is small: bench/sampler.py's 8 rows x 128 new tokens.
  short = np.random.RandomState(0).randint(3, model_cfg.vocab_size, (B, PROMPT)).tolist()
  short_sp = SamplingParams(max_new_tokens=NEW, temperature=1.0)
  small = PagedEngine(model_cfg, params, PagedConfig(slots=B, steps_per_sync=16), weights=weights)
  short_times = interleaved(
    {
      "static": lambda: jax_sampler.generate(
        model_cfg, params, short, short_sp, seed=0, weights=weights
      ),
      "continuous": lambda: small.generate(short, 1, short_sp, seed=0),
      "torch_matmuls": torch_matmuls(path),
    },
    reps=max(args.reps, 3),
  )
  short_med = {k: statistics.median(v) for k, v in short_times.items()}
  assert small.stats.decode_steps == NEW  # the first token comes from the prefill
  vllm = None if args.novllm else vllm_tokens_per_s(path, expanded, caps)
  tmp.cleanup()
  bytes_per_token = 2 * model_cfg.num_layers * model_cfg.num_kv_heads * model_cfg.head_dim * 4
  static_kv = len(expanded) * (-(-max(p_len) // 32) * 32 + CAP) * bytes_per_token
  paged_kv = engine.stats.peak_kv_bytes
  paged_alloc = len(engine.pool.refs) * engine.stats.page_bytes  # the pool as allocated
  out = {
    "bench": "engine",
    "date": time.strftime("%Y-%m-%d"),
    "model_params": model_cfg.num_params,
    "workload": {
      "prompts": args.prompts,
      "samples": args.samples,
      "tokens": tokens,
      "response_median": float(np.median(caps)),
      "response_cap": CAP,
      "truncated": round(float(np.mean(caps >= CAP)), 3),
    },
    "engine": {
      "slots": args.slots,
      "page_size": args.page_size,
      "steps_per_sync": args.steps_per_sync,
      "decode_steps": decode_steps,
    },
    "tokens_per_s": {k: spread(v, tokens) for k, v in times.items()},
    "continuous_vs_static": round(med["static"] / med["continuous"], 3),
    "kv_mb": {
      "static_allocated": round(static_kv / 2**20, 1),
      "paged_allocated": round(paged_alloc / 2**20, 1),
      "paged_peak_in_use": round(paged_kv / 2**20, 1),
    },
    "paged_vs_static_kv_allocated": round(paged_alloc / static_kv, 3),
    "paged_in_use_vs_static_kv": round(paged_kv / static_kv, 3),
    "vllm_cpu_tokens_per_s": round(vllm, 1) if vllm else None,
    "continuous_vs_vllm_cpu": round(tokens / med["continuous"] / vllm, 3) if vllm else None,
    "short_step_ms": {k: round(v * 1e3 / NEW, 3) for k, v in short_med.items()},
    "short_step_vs_torch_matmuls": {
      k: round(short_med[k] / short_med["torch_matmuls"], 3) for k in ("static", "continuous")
    },
    "reps": args.reps,
  }
  print(json.dumps(out))


if __name__ == "__main__":
  main()
