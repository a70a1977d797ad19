"""Continuous batching over a paged KV cache vs the static-batch sampler, on ProRL-shaped lengths.

  python bench/engine.py [--reps=3] [--prompts=64] [--samples=8] [--slots=64]

The same random 4.5M-parameter Qwen2 as bench/sampler.py; 64 prompts x 8 samples whose prompt
and response lengths are drawn from the distribution bench/packing.py uses (lognormal, median
~2,000 tokens, 7% truncated at the 8,192 cap; scaled down 16x for the CPU: cap 512). Each row
stops at its drawn length (a per-row token limit, the same in both engines), so both generate
exactly the same tokens' worth of work: the static sampler as one batch of every row (what the
JAX worker does with a request), the continuous engine through its slots. Timed in turns in one
process (`--reps` calls each, after a warm-up call): generated tokens per second, best and
median, and the ratio of the medians. Also: peak KV memory of each (the static cache is every
row at the longest length; the paged one its peak pages in use) and the continuous engine's
decode step beside the same step's weight matmuls alone in torch.

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
from sampler import KW  # noqa: E402

CAP = 8192 // SCALE


def torch_step_matmuls(cfg, rows: int, steps: int = 20) -> float:
  """Seconds of one decode step's weight matmuls alone, for `rows` rows, in torch (float32)."""
  import torch

  d, f, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
  qkv = (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
  ws = [
    (torch.randn(d, qkv), torch.randn(cfg.num_heads * cfg.head_dim, d), torch.randn(d, 2 * f))
    for _ in range(cfg.num_layers)
  ]
  down = [torch.randn(f, d) for _ in range(cfg.num_layers)]
  head = torch.randn(d, v)
  x = torch.randn(rows, d)

  def step():
    h = x
    for (a, o, gu), dn in zip(ws, down):
      q = h @ a
      h = h + q[:, : o.shape[0]] @ o
      h = h + (h @ gu)[:, :f] @ dn
    return h @ head

  with torch.no_grad():
    step()
    t0 = time.perf_counter()
    for _ in range(steps):
      step()
  return (time.perf_counter() - t0) / steps


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--prompts", type=int, default=64)
  ap.add_argument("--samples", type=int, default=8)
  ap.add_argument("--slots", type=int, default=64)
  ap.add_argument("--page_size", type=int, default=16)
  ap.add_argument("--steps_per_sync", type=int, default=16)
  args = ap.parse_args()

  import jax
  import numpy as np

  from prorl_jax.model import init_params, presets
  from prorl_jax.records import SamplingParams
  from prorl_jax.rollout.engines import jax_sampler
  from prorl_jax.rollout.engines.paged import PagedConfig, PagedEngine

  cfg = presets.Qwen2Config(**KW, eos_token_id=None)
  params = init_params(cfg, jax.random.PRNGKey(0))
  rng = np.random.RandomState(0)
  rows = args.prompts * args.samples
  p_len, _ = lengths(rng, args.prompts)
  _, r_len = lengths(rng, rows)
  prompts = [[int(t) for t in rng.randint(1, cfg.vocab_size, size=n)] for n in p_len]
  caps = np.minimum(r_len, CAP).astype(np.int32)
  sp = SamplingParams(max_new_tokens=CAP, temperature=1.0)
  weights = jax_sampler.prepare(cfg, params)
  engine = PagedEngine(
    cfg,
    params,
    PagedConfig(slots=args.slots, page_size=args.page_size, steps_per_sync=args.steps_per_sync),
    weights=weights,
  )
  expanded = [p for p in prompts for _ in range(args.samples)]
  got = {}

  def static():
    got["static"] = jax_sampler.generate(
      cfg, params, expanded, sp, seed=0, weights=weights, max_new=caps
    )

  def continuous():
    got["continuous"] = engine.generate(prompts, args.samples, sp, seed=0, max_new=caps)

  times = interleaved({"static": static, "continuous": continuous}, reps=args.reps)
  tokens = int(caps.sum())
  for name in got:
    assert int(got[name]["lengths"].sum()) == tokens, name  # the same work in both
  med = {k: statistics.median(v) for k, v in times.items()}
  bytes_per_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 4
  static_kv = len(expanded) * (-(-max(p_len) // 32) * 32 + CAP) * bytes_per_token
  paged_kv = engine.stats["peak_pages"] * engine.stats["page_bytes"]
  step_s = med["continuous"] / max(engine.stats["decode_steps"], 1)
  matmul_s = torch_step_matmuls(cfg, args.slots)
  out = {
    "bench": "engine",
    "date": time.strftime("%Y-%m-%d"),
    "model_params": cfg.num_params,
    "workload": {
      "prompts": args.prompts,
      "samples": args.samples,
      "tokens": tokens,
      "response_median": float(np.median(caps)),
      "response_cap": CAP,
      "truncated": round(float(np.mean(caps >= CAP)), 3),
    },
    "engine": {"slots": args.slots, "page_size": args.page_size, "steps": args.steps_per_sync},
    "tokens_per_s": {k: spread(v, tokens) for k, v in times.items()},
    "continuous_vs_static": round(med["static"] / med["continuous"], 3),
    "peak_kv_mb": {"static": round(static_kv / 2**20, 1), "paged": round(paged_kv / 2**20, 1)},
    "paged_vs_static_kv": round(paged_kv / static_kv, 3),
    "decode_step_ms": round(step_s * 1e3, 3),
    "torch_step_matmuls_ms": round(matmul_s * 1e3, 3),
    "step_vs_torch_matmuls": round(step_s / matmul_s, 3),
    "reps": args.reps,
  }
  print(json.dumps(out))


if __name__ == "__main__":
  main()
