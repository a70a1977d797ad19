"""The GPU checks: 1.5B train-step MFU in bf16, fused vs XLA attention, sampler vs HF generate.

  python bench/gpu.py --out DIR        # on an NVIDIA GPU (H200 here); prints JSON lines
  python bench/gpu.py --smoke --out DIR  # the same stages on a tiny model, any backend

Stages (each one JSON line, also appended to DIR/gpu.jsonl; a failing stage prints its error and
the next one runs):
  matmul   bf16 8192^3 `jnp.dot` TFLOP/s (the measured ceiling; the datasheet says 989 dense)
  parity   fused (cuDNN) vs XLA attention on a small Qwen2 with left padding: max |Δ log-prob|
  train    the real ProRL train step of R1-Distill-Qwen-1.5B (fp32 master params, bf16 compute,
           full remat) on one device, per attention implementation: tokens/s and MFU =
           model FLOPs (6·N + attention) / step time / 989 TFLOP/s
  torch    the same work in transformers/torch (Qwen2ForCausalLM, bf16 autocast, fp32 params,
           gradient checkpointing, SDPA, fused AdamW) as a ratio
  sampler  the JAX sampler vs transformers `generate` on the same 1.5B shape and batch
           (the peers `torch` and `sampler_hf`: bench/gpu_peers.py)
  pipeline serial vs pipelined RL steps, trainer and JAX-sampler worker as two processes sharing
           the GPU (random 1.5B-shape weights); in its own invocation: `--stages=pipeline`
  pairs, decode_ops, decode, engine, packed, e2e: where an RL step's hardware time goes
           (bench/gpu_counts.py and bench/gpu_rl.py say what each measures); `--stages=rl`
           runs them all in order
`--stages` picks and orders them; `train_cudnn@dots` sets the remat policy, `sampler_jax@256` the
batch. A deadline (`--budget-s`) skips the stages that would start after it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import gpu_peers  # noqa: E402
import gpu_rl  # noqa: E402
from benchutil import (  # noqa: E402
  H200_BF16_DENSE,
  big_cfg,
  median_time,
  model_flops_per_token,
  sampler_shape,
  small_cfg,
)


def stage_matmul(args):
  import jax
  import jax.numpy as jnp

  n = 1024 if args.smoke else 8192
  a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.bfloat16)
  f = jax.jit(lambda x, y: x @ y)
  t = median_time(lambda: f(a, a).block_until_ready(), 10)
  return {
    "devices": [str(d) for d in jax.devices()],
    "jax": jax.__version__,
    "matmul_bf16_tflops": round(2 * n**3 / t / 1e12, 1),
  }


def stage_parity(args):
  import jax
  import jax.numpy as jnp
  import numpy as np

  from prorl_jax.model import forward, init_params

  b, t = 4, 128
  rng = np.random.RandomState(0)
  tokens = rng.randint(0, 1024, (b, t)).astype(np.int32)
  mask = np.ones((b, t), np.int32)
  for i, pad in enumerate((0, 5, 40, 100)):
    mask[i, :pad] = 0  # left padding, as in the rollouts' prompts
  params = init_params(small_cfg("xla"), jax.random.PRNGKey(0))
  out = {}
  for impl in ("xla", "cudnn"):
    logits = forward(small_cfg(impl), params, jnp.asarray(tokens), jnp.asarray(mask))
    out[impl] = np.asarray(jax.nn.log_softmax(logits.astype(jnp.float32), -1))
  real = mask.astype(bool)
  diff = np.abs(out["xla"] - out["cudnn"])[real]  # [real tokens, vocab]
  return {
    "max_abs_logprob_diff": float(diff.max()),
    "mean_abs_logprob_diff": float(diff.mean()),
    "finite": bool(np.isfinite(out["cudnn"][real]).all()),
  }


def stage_train(args, impl, remat="full"):
  import jax
  import numpy as np

  from prorl_jax.parallel.sharding import make_mesh
  from prorl_jax.trainer import compiled
  from prorl_jax.trainer import train_step as ts

  model_cfg = big_cfg(impl, args, remat)
  b, t, micro = (4, 128, 2) if args.smoke else (args.seqs, args.seq_len, args.micro_batches)
  mesh = make_mesh(1, 1, 1, devices=jax.devices()[:1])
  tx = ts.make_optimizer(1e-6)
  lc = ts.LossConfig(micro_batches=micro, logit_chunk=min(t, 1024))
  state = ts.create_train_state(model_cfg, tx, mesh, jax.random.PRNGKey(0))
  rng = np.random.RandomState(0)
  mask = np.ones((b, t), np.int32)
  loss_mask = mask.copy()
  loss_mask[:, : t // 4] = 0  # a prompt, then the response
  batch = {
    "tokens": rng.randint(0, model_cfg.vocab_size, (b, t)).astype(np.int32),
    "attn_mask": mask,
    "loss_mask": loss_mask,
    "adv": rng.randn(b, t).astype(np.float32),
  }
  for k in ("old_logp", "ref_logp", "gen_logp"):
    batch[k] = np.full((b, t), -np.log(model_cfg.vocab_size), np.float32)
  batch = jax.device_put(batch)
  step = compiled.jit_train_step(model_cfg, tx, lc, mesh, (b, t))
  t0 = time.perf_counter()
  compiled = step.lower(state, batch).compile()
  compile_s = time.perf_counter() - t0
  holder = {"state": state}
  metrics = {}

  def run():
    holder["state"], m = compiled(holder["state"], batch)
    metrics.update(jax.device_get(m))

  dt = median_time(run, args.steps)
  flops = model_flops_per_token(model_cfg, t) * b * t
  mem = {}
  try:
    stats = jax.devices()[0].memory_stats() or {}
    mem = {"peak_gib": round(stats.get("peak_bytes_in_use", 0) / 2**30, 1)}
  except Exception:  # noqa: BLE001 - not every backend reports memory
    pass
  return {
    "attention_impl": impl,
    "remat": remat,
    "params": model_cfg.num_params,
    "batch": [b, t],
    "micro_batches": micro,
    "compile_s": round(compile_s, 1),
    "step_s": round(dt, 3),
    "tokens_per_s": round(b * t / dt),
    "model_tflops": round(flops / dt / 1e12, 1),
    "mfu_vs_989": round(flops / dt / H200_BF16_DENSE, 3),
    "loss_finite": bool(np.isfinite(metrics.get("actor/loss", np.nan))),
    "grad_norm": float(metrics.get("actor/grad_norm", np.nan)),
    "skipped": int(metrics.get("actor/skipped", 1)),
    **mem,
  }


def stage_sampler_jax(args, batch=None):
  import jax
  import numpy as np

  from prorl_jax.model import init_params
  from prorl_jax.rollout.engines import jax_sampler

  model_cfg = big_cfg("xla", args).replace(param_dtype="bfloat16", remat="none")
  b, p, n = sampler_shape(args, batch)
  params = init_params(model_cfg, jax.random.PRNGKey(0))
  rng = np.random.RandomState(0)
  prompts = [list(rng.randint(1, model_cfg.vocab_size, p)) for _ in range(b)]
  sp = jax_sampler.SamplingParams(max_new_tokens=n, temperature=1.0)
  t0 = time.perf_counter()
  weights = jax_sampler.prepare(model_cfg, params)  # once per weight version, as the worker does
  gen = lambda seed: jax_sampler.generate(
    model_cfg,
    params,
    prompts,
    sp,
    seed=seed,  # noqa: E731
    weights=weights,
  )
  gen(0)
  first_s = time.perf_counter() - t0
  jt = median_time(lambda: gen(1), 2)
  out = gen(2)
  return {
    "batch": b,
    "prompt": p,
    "new_tokens": n,
    "first_call_s": round(first_s, 1),
    "tokens_per_s": round(int(out.lengths.sum()) / jt),
  }


def stage_pipeline(args):
  """Serial vs pipelined RL steps with the trainer and a JAX-sampler worker as two processes on
  the one GPU, its memory split between them (`model.memory_fraction` for the trainer,
  XLA_PYTHON_CLIENT_MEM_FRACTION for the worker); random weights of the 1.5B shape on the demo's
  prompts, dynamic sampling off (every group trains, whatever it scores). Run it in a process of
  its own (`--stages=pipeline`): JAX in this process must not hold the GPU."""
  import shutil
  import subprocess

  import pipeline as pl  # bench/pipeline.py

  base = os.path.join(
    os.path.abspath(args.out), "pipeline_base_smoke" if args.smoke else "pipeline_base"
  )
  t0 = time.time()
  code = f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); import benchutil; "
  code += f"benchutil.build_random_base({base!r}, {args.smoke})"
  # Built on the CPU: this process (and its JAX) stays off the GPU the two processes share.
  subprocess.run(
    [sys.executable, "-c", code], check=True, env=dict(os.environ, JAX_PLATFORMS="cpu")
  )
  build_s = time.time() - t0
  p, n, length = (8, 4, 32) if args.smoke else (args.pipe_prompts, 8, args.pipe_len)
  flags = (
    "--config.model.param_dtype=float32",
    "--config.model.compute_dtype=bfloat16",
    "--config.model.remat=" + ("dots" if args.smoke else "full"),
    f"--config.rollout.prompts_per_step={p}",
    f"--config.rollout.mini_batch_prompts={max(1, p // 4)}",
    f"--config.rollout.n={n}",
    f"--config.rollout.max_response_len={length}",
    f"--config.rollout.token_budget={2048 if args.smoke else 16384}",
    "--config.rollout.pack_row_len=0",
    "--config.algo.dynamic_sampling=False",
    "--config.algo.is_correction=tis",
    f"--config.model.memory_fraction={0 if args.smoke else args.trainer_memory}",
  )
  worker_env = {} if args.smoke else {"XLA_PYTHON_CLIENT_MEM_FRACTION": str(args.worker_memory)}
  runs = {}
  for mode in ("serial", "pipelined"):
    run_dir = os.path.join(os.path.abspath(args.out), f"pipeline_{mode}")
    shutil.rmtree(run_dir, ignore_errors=True)
    runs[mode] = pl.run(
      base, run_dir, args.pipe_steps, mode == "pipelined", flags=flags, worker_env=worker_env
    )
  g, u = runs["serial"]["wait_rollouts_s"], runs["serial"]["update_s"]
  return {
    "model_params": "random, " + ("small" if args.smoke else "R1-Distill-Qwen-1.5B shape"),
    "prompts_x_samples": [p, n],
    "max_response_len": length,
    "steps": args.pipe_steps,
    "base_build_s": round(build_s, 1),
    "serial": runs["serial"],
    "pipelined": runs["pipelined"],
    "generation_s_g": g,
    "update_s_u": u,
    "ceiling": round((g + u) / max(g, u, 1e-9), 2),
    "pipelined_vs_serial": round(
      runs["pipelined"]["steps_per_hour"] / runs["serial"]["steps_per_hour"], 3
    ),
  }


def _ratios(rows):
  """Peer ratios from the stages recorded so far (the peers run in their own process)."""
  out = {}
  jax_train = [r for k, r in rows.items() if k.startswith("train_") and "step_s" in r]
  if jax_train and "step_s" in rows.get("torch", {}):
    best = min(jax_train, key=lambda r: r["step_s"])
    out["train_ratio_vs_torch"] = round(rows["torch"]["step_s"] / best["step_s"], 2)
    out["train_best_attention_impl"] = best["attention_impl"]
    out["mfu_vs_989"] = best["mfu_vs_989"]
  for name, row in rows.items():  # sampler_jax[@B] against sampler_hf[@B]
    peer = rows.get(name.replace("sampler_jax", "sampler_hf"), {})
    if name.startswith("sampler_jax") and "tokens_per_s" in row and "tokens_per_s" in peer:
      out[name.replace("sampler_jax", "sampler_ratio_vs_hf_generate")] = round(
        row["tokens_per_s"] / peer["tokens_per_s"], 2
      )
  return out


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--out", default=".")
  ap.add_argument("--smoke", action="store_true")
  ap.add_argument("--budget-s", type=float, default=420)
  ap.add_argument("--steps", type=int, default=3)
  ap.add_argument("--seqs", type=int, default=16)
  ap.add_argument("--seq-len", type=int, default=4096)
  ap.add_argument("--micro-batches", type=int, default=2)
  ap.add_argument("--gen-batch", type=int, default=64)
  ap.add_argument("--gen-tokens", type=int, default=512)
  ap.add_argument("--pipe-steps", type=int, default=6)  # the first two are not timed
  ap.add_argument("--pipe-prompts", type=int, default=16)
  ap.add_argument("--pipe-len", type=int, default=512)
  ap.add_argument("--trainer-memory", type=float, default=0.5)
  ap.add_argument("--worker-memory", type=float, default=0.4)
  ap.add_argument("--packed-impl", default="cudnn", help="attention of the `packed` stage")
  ap.add_argument("--packed-row-len", type=int, default=0, help="`packed`: 0 = 16,384")
  ap.add_argument("--e2e-timeout", type=float, default=400)
  # JAX and torch each hold on to GPU memory they used: run the peers in a second process,
  # e.g. --stages=torch,sampler_hf --out=SAME_DIR (the summary reads that dir's gpu.jsonl).
  ap.add_argument("--stages", default="matmul,parity,train_cudnn,train_xla,sampler_jax")
  args = ap.parse_args()
  os.makedirs(args.out, exist_ok=True)
  start = time.time()
  stages = {
    "matmul": stage_matmul,
    "parity": stage_parity,
    "train_cudnn": lambda a: stage_train(a, "cudnn"),
    "train_xla": lambda a: stage_train(a, "xla"),
    "torch": gpu_peers.stage_torch,
    "sampler_jax": stage_sampler_jax,
    "sampler_hf": gpu_peers.stage_sampler_hf,
    "pipeline": stage_pipeline,
    **gpu_rl.STAGES,
  }
  if args.stages == "rl":
    args.stages = ",".join(gpu_rl.STAGES)
  log = os.path.join(args.out, "gpu.jsonl")
  for name in args.stages.split(","):
    if time.time() - start > args.budget_s:
      row = {"stage": name, "skipped": "past --budget-s"}
    else:
      t0 = time.time()
      base, _, opt = name.partition("@")  # train_cudnn@dots: remat; sampler_jax@256: batch
      try:
        if not opt:
          row = {"stage": name, **stages[base](args)}
        elif base.startswith("train_"):
          row = {"stage": name, **stage_train(args, base[len("train_") :], opt)}
        else:
          row = {"stage": name, **stages[base](args, int(opt))}
      except Exception as e:  # noqa: BLE001 - report and go on to the next stage
        traceback.print_exc()
        row = {"stage": name, "error": f"{type(e).__name__}: {str(e)[:300]}"}
      row["wall_s"] = round(time.time() - t0, 1)
    print(json.dumps(row), flush=True)
    with open(log, "a") as f:
      f.write(json.dumps(row) + "\n")
  with open(log) as f:
    rows = {r["stage"]: r for r in map(json.loads, f)}
  print(json.dumps({**rows, **_ratios(rows)}))


if __name__ == "__main__":
  main()
