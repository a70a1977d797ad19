"""The RL stages of bench/gpu.py: where the hardware time of a ProRL step goes.

  python bench/gpu.py --stages=pairs,decode_ops,decode,engine,packed,e2e --budget-s=480 --out DIR
  python bench/gpu.py --smoke --stages=pairs,decode_ops,decode,engine,packed,e2e --out DIR

Stages (each one JSON line; with --smoke a small model and short lengths, any backend):
  pairs, decode_ops  counted on the CPU (bench/gpu_counts.py says what each counts).
  decode      the static sampler at batch 64 and 256 (prompt 256, 512 new tokens, bf16): time
              per step, bytes per step (bf16 weights + the live KV cache at the step's mean
              length) and their ratio to the device's HBM bandwidth (the roofline fraction).
  engine      continuous batching vs the static sampler on ProRL-shaped rows (64 prompts x 8,
              responses log-normal with median ~540, cap 2,048), interleaved: tokens/s each,
              the ratio, the engine's first call (compiles) and its step's roofline fraction.
  packed      the real update of the 1.5B model, packed rows vs padded micro-batches, on the
              same ProRL-shaped mini-batch, interleaved: real tokens/s, tokens processed/s.
  e2e         `prorl_jax.main` for 3 steps with `rollout.engine=inline` on a random base of the
              1.5B shape on one device: generated, trained and end-to-end tokens/s, the step's
              split (rollout, update, publish) and the sampler-vs-trainer gap (is/mismatch_kl).
              A machine without internet and without the project's other packages gets them as
              wheels: `bash bench/gpu_wheels.sh` here, then carry .whl/ (its header says how).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import gpu_counts
import numpy as np
from benchutil import prorl_lengths, rl_cfg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HBM_BYTES_PER_S = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12}  # by device_kind


def hbm_bytes_per_s() -> float | None:
  import jax

  kind = jax.devices()[0].device_kind
  return next((v for k, v in HBM_BYTES_PER_S.items() if k in kind), None)


# --------------------------------------------------------------------------------------- decode


def _kv_bytes_per_token(model_cfg, itemsize=2) -> int:
  return 2 * model_cfg.num_layers * model_cfg.num_kv_heads * model_cfg.head_dim * itemsize


def _param_bytes(params) -> int:
  import jax

  return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params))


def stage_decode(args):
  import jax

  from prorl_jax.model import init_params
  from prorl_jax.records import SamplingParams
  from prorl_jax.rollout.engines import jax_sampler

  model_cfg = rl_cfg(args, param_dtype="bfloat16", remat="none")
  params = init_params(model_cfg, jax.random.PRNGKey(0))
  weights = jax_sampler.prepare(model_cfg, params)
  prompt, new = (32, 32) if args.smoke else (256, 512)
  hbm = hbm_bytes_per_s()
  rng = np.random.RandomState(0)
  out = {"hbm_bytes_per_s": hbm, "prompt": prompt, "new_tokens": new}
  for batch in (8, 16) if args.smoke else (64, 256):
    prompts = [list(rng.randint(1, model_cfg.vocab_size, prompt)) for _ in range(batch)]
    sp = SamplingParams(max_new_tokens=new, temperature=1.0)
    run = lambda seed: jax_sampler.generate(
      model_cfg, params, prompts, sp, seed=seed, weights=weights
    )  # noqa: E731,B023
    t0 = time.perf_counter()
    run(0)
    first = time.perf_counter() - t0
    times = []
    for seed in (1, 2):
      t0 = time.perf_counter()
      got = run(seed)
      times.append(time.perf_counter() - t0)
    step = min(times) / new  # the prefill is in it: an upper bound on the step
    live_kv = batch * (prompt + new / 2) * _kv_bytes_per_token(model_cfg)
    moved = _param_bytes(weights) + live_kv
    out[f"batch_{batch}"] = {
      "first_call_s": round(first, 1),
      "tokens_per_s": round(int(got.lengths.sum()) / min(times)),
      "step_ms": round(step * 1e3, 3),
      "bytes_per_step_gb": round(moved / 1e9, 3),
      "roofline_fraction": round(moved / step / hbm, 3) if hbm else None,
    }
  return out


# --------------------------------------------------------------------------------------- engine


def stage_engine(args):
  import jax

  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  from benchutil import interleaved

  from prorl_jax.model import init_params
  from prorl_jax.records import SamplingParams
  from prorl_jax.rollout.engines import jax_sampler
  from prorl_jax.rollout.engines.paged import PagedConfig, PagedEngine

  model_cfg = rl_cfg(args, param_dtype="bfloat16", remat="none")
  params = init_params(model_cfg, jax.random.PRNGKey(0))
  weights = jax_sampler.prepare(model_cfg, params)
  n_prompts, samples, cap, median = (8, 4, 128, 40) if args.smoke else (64, 8, 2048, 540)
  rng = np.random.RandomState(0)
  p_len, _ = prorl_lengths(rng, n_prompts, scale=16 if args.smoke else 1)
  _, r_len = prorl_lengths(rng, n_prompts * samples, median=median, cap=cap)
  prompts = [[int(t) for t in rng.randint(1, model_cfg.vocab_size, size=n)] for n in p_len]
  caps = np.minimum(r_len, cap).astype(np.int32)
  sp = SamplingParams(max_new_tokens=cap, temperature=1.0)
  slots = 32 if args.smoke else 256
  t0 = time.perf_counter()
  engine = PagedEngine(
    model_cfg, params, PagedConfig(slots=slots, page_size=16, steps_per_sync=16), weights=weights
  )
  engine.generate(prompts[:2], samples, sp, seed=0, max_new=caps[: 2 * samples])
  first = time.perf_counter() - t0
  expanded = [p for p in prompts for _ in range(samples)]
  jax_sampler.generate(
    model_cfg, params, expanded[:2], sp, seed=0, weights=weights, max_new=caps[:2]
  )
  steps = {}

  def continuous():
    gen = engine.generate(prompts, samples, sp, seed=0, max_new=caps)
    steps["decode"] = gen.stats.decode_steps

  def static():
    jax_sampler.generate(model_cfg, params, expanded, sp, seed=0, weights=weights, max_new=caps)

  times = interleaved({"static": static, "continuous": continuous}, reps=2)
  tokens = int(caps.sum())
  med = {k: statistics.median(v) for k, v in times.items()}
  hbm = hbm_bytes_per_s()
  step = med["continuous"] / max(steps["decode"], 1)
  live = min(slots, len(expanded)) * (float(np.mean(p_len)) + float(np.mean(caps)) / 2)
  moved = _param_bytes(weights) + live * _kv_bytes_per_token(model_cfg)
  return {
    "rows": len(expanded),
    "tokens": tokens,
    "response_median": float(np.median(caps)),
    "slots": slots,
    "first_call_s": round(first, 1),
    "tokens_per_s": {k: round(tokens / v) for k, v in med.items()},
    "continuous_vs_static": round(med["static"] / med["continuous"], 3),
    "decode_steps": steps["decode"],
    "step_ms": round(step * 1e3, 3),
    "step_roofline_fraction": round(moved / step / hbm, 3) if hbm else None,
  }


# --------------------------------------------------------------------------------------- packed


def stage_packed(args):
  import jax

  from prorl_jax.algo import packing
  from prorl_jax.parallel.sharding import make_mesh
  from prorl_jax.trainer import compiled
  from prorl_jax.trainer import train_step as ts

  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  from benchutil import interleaved

  impl = args.packed_impl if jax.default_backend() == "gpu" else "xla"  # cuDNN: NVIDIA only
  model_cfg = rl_cfg(args, impl=impl, remat="full" if not args.smoke else "dots")
  scale = 16 if args.smoke else 1
  rows, micro, row_len = 64, 8, (args.packed_row_len or 16384) // scale
  rng = np.random.RandomState(0)
  p, r = prorl_lengths(rng, rows, scale=scale)
  tp, tr = -(-int(p.max()) // 16) * 16, -(-int(r.max()) // 16) * 16
  pos = np.arange(tp + tr)[None]
  attn = ((pos >= tp - p[:, None]) & (pos < tp + r[:, None])).astype(np.int32)
  loss = ((pos >= tp) & (pos < tp + r[:, None])).astype(np.int32)
  f = lambda s: (rng.randn(*attn.shape) * s).astype(np.float32) * loss  # noqa: E731
  old = f(0.3) - 3.0
  batch = {
    "tokens": np.where(attn > 0, rng.randint(3, model_cfg.vocab_size, attn.shape), 0).astype(
      np.int32
    ),
    "attn_mask": attn,
    "loss_mask": loss,
    "old_logp": old,
    "ref_logp": old,
    "gen_logp": old,
    "adv": f(1.0),
  }
  mesh = make_mesh(1, 1, 1, devices=jax.devices()[:1])
  tx = ts.make_optimizer(1e-6)
  # two states: each step donates its own
  state = {
    k: ts.create_train_state(model_cfg, tx, mesh, jax.random.PRNGKey(0)) for k in ("pad", "pack")
  }
  lc = ts.LossConfig(micro_batches=rows // micro, logit_chunk=1024 // scale)
  padded = compiled.jit_train_step(model_cfg, tx, lc, mesh, attn.shape)
  packed = ts.PackedTrainStep(
    model_cfg.replace(attention_window=int((p + r).max())),
    tx,
    ts.LossConfig(logit_chunk=1024 // scale),
    mesh,
    (1, row_len),
  )
  plan = packing.plan(attn, loss, length=row_len, rows=1)
  slabs = packing.slabs(plan, batch, ts.PER_TOKEN_KEYS)
  counts = (loss.sum(), (loss.sum(1) > 0).sum())

  def run_padded():
    state["pad"], m = padded(state["pad"], batch)
    jax.block_until_ready(m)

  def run_packed():
    state["pack"], m = packed(state["pack"], slabs, counts)
    jax.block_until_ready(m)

  t0 = time.perf_counter()
  run_padded()
  run_packed()
  compile_s = time.perf_counter() - t0
  times = interleaved({"padded": run_padded, "packed": run_packed}, reps=args.steps)
  med = {k: statistics.median(v) for k, v in times.items()}
  real = int(attn.sum())
  processed = {"padded": int(attn.size), "packed": int(plan.slabs * row_len)}
  return {
    "attention_impl": impl,
    "row_len": row_len,
    "real_tokens": real,
    "padded_shape": list(attn.shape),
    "packed_slabs": plan.slabs,
    "packed_fill": round(plan.fill_fraction, 3),
    "compile_s": round(compile_s, 1),
    "real_tokens_per_s": {k: round(real / v) for k, v in med.items()},
    "processed_tokens_per_s": {k: round(processed[k] / v) for k, v in med.items()},
    "packed_vs_padded": round(med["padded"] / med["packed"], 3),
    "per_processed_token_cost_packed_vs_padded": round(
      (med["packed"] / processed["packed"]) / (med["padded"] / processed["padded"]), 3
    ),
  }


# ------------------------------------------------------------------------------------------ e2e


def stage_e2e(args):
  out_dir = os.path.abspath(args.out)
  base = os.path.join(out_dir, "e2e_base_smoke" if args.smoke else "e2e_base")
  code = f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); import benchutil; "
  code += f"benchutil.build_random_base({base!r}, {args.smoke})"
  t0 = time.time()
  subprocess.run(
    [sys.executable, "-c", code], check=True, env=dict(os.environ, JAX_PLATFORMS="cpu")
  )
  build_s = time.time() - t0
  # the base is built in a child on the CPU: this process keeps JAX off the device
  run_dir = os.path.join(out_dir, "e2e_run")
  p, n, length = (4, 4, 32) if args.smoke else (16, 8, 1024)
  argv = [
    "--config=configs/tiny.py",
    f"--config.run_dir={run_dir}",
    f"--config.model.path={base}",
    "--config.total_steps=3",
    "--config.rollout.engine=inline",
    "--config.model.param_dtype=float32",
    "--config.model.compute_dtype=bfloat16",
    "--config.jax_engine.dtype=bfloat16",
    "--config.model.remat=full",
    f"--config.rollout.prompts_per_step={p}",
    f"--config.rollout.mini_batch_prompts={max(1, p // 4)}",
    f"--config.rollout.n={n}",
    f"--config.rollout.max_response_len={length}",
    "--config.algo.dynamic_sampling=False",
    "--config.eval.every=0",
    "--config.checkpoint.every=0",
  ]
  t0 = time.time()
  proc = subprocess.run(
    [sys.executable, "-m", "prorl_jax.main", *argv],
    cwd=ROOT,
    env=dict(os.environ, PYTHONPATH=ROOT),
    capture_output=True,
    text=True,
    timeout=args.e2e_timeout,
  )
  wall = time.time() - t0
  if proc.returncode != 0:
    raise RuntimeError(f"prorl_jax.main exited {proc.returncode}: {proc.stderr[-1500:]}")
  rows = [json.loads(x) for x in open(os.path.join(run_dir, "metrics.jsonl"))]
  steps = [r for r in rows if "time/step_s" in r]
  timed = steps[1:] or steps  # the first step compiles
  mean = lambda k: round(statistics.mean(r.get(k, float("nan")) for r in timed), 4)  # noqa: E731
  gen = sum(r.get("response/tokens", 0) for r in timed)
  step_s = sum(r["time/step_s"] for r in timed)
  return {
    "steps": len(steps),
    "base_build_s": round(build_s, 1),
    "wall_s": round(wall, 1),
    "first_step_s": round(steps[0]["time/step_s"], 1) if steps else None,
    "step_s": mean("time/step_s"),
    "rollout_s": mean("time/rollout_s"),
    "update_s": mean("time/update_s"),
    "publish_s": mean("time/publish_s"),
    "generated_tokens_per_s": round(gen / max(sum(r["time/rollout_s"] for r in timed), 1e-9)),
    "end_to_end_tokens_per_s": round(gen / max(step_s, 1e-9)),
    "is_mismatch_kl": mean("is/mismatch_kl"),
    "is_raw_mean": mean("is/raw_mean"),
  }


STAGES = {
  **gpu_counts.STAGES,
  "decode": stage_decode,
  "engine": stage_engine,
  "packed": stage_packed,
  "e2e": stage_e2e,
}
