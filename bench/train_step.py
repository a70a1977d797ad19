"""Train-step throughput vs transformers/torch on this machine, in one run; prints JSON lines.

  make bench            # or: python bench/train_step.py [--skip-aot] [--reps 7] [--remat dots]

For the tiny and a ~50M-parameter Qwen2: tokens/s of one fwd+bwd+AdamW update (JAX: the real
ProRL train step; torch: Qwen2ForCausalLM + cross-entropy + AdamW, fp32, same batch), the two
timed in turns in one process (best and median of `--reps` steps each), model FLOP/s ÷ the
measured `jnp.dot` f32 peak, and the ratio JAX/torch of the medians. Then an AOT compile of the
qwen15b-shaped step on a fake 8-device CPU mesh (fsdp 8; fsdp 4 × tensor 2) with per-device
memory from `compiled.memory_analysis()`, in a subprocess (the device count is fixed at import).
The last line is one JSON object with `ratio_vs_torch` and `matmul_peak_fraction` (larger config).
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

from benchutil import (  # noqa: E402
  aot_child,
  interleaved,
  median_time,
  model_flops_per_token,
  spread,
)

CONFIGS = {
  # name: (Qwen2 kwargs, batch, seq)
  "tiny_4.5M": (
    dict(
      vocab_size=2048,
      hidden_size=256,
      intermediate_size=1024,
      num_layers=4,
      num_heads=4,
      num_kv_heads=2,
      head_dim=64,
      tie_word_embeddings=True,
    ),
    8,
    256,
  ),
  "qwen2_50M": (
    dict(
      vocab_size=16384,
      hidden_size=512,
      intermediate_size=1536,
      num_layers=10,
      num_heads=8,
      num_kv_heads=4,
      head_dim=64,
      tie_word_embeddings=False,
    ),
    4,
    256,
  ),
}


# The layer policy of the JAX step (--remat): "dots" keeps the matmul outputs and recomputes the
# elementwise ops, which on XLA:CPU beats saving everything ("none": the layer scan then stacks
# many large residual buffers; bench/RESULTS.md has both).


def matmul_peak(n=2048, steps=5):
  import jax
  import jax.numpy as jnp

  a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
  f = jax.jit(lambda x, y: x @ y)
  t = median_time(lambda: f(a, a).block_until_ready(), steps)
  return 2 * n**3 / t


def jax_step(kw, b, t, remat):
  """(model config, one call of the real train step on a fixed batch)."""
  import jax
  import numpy as np

  from prorl_jax.model import init_params, presets
  from prorl_jax.parallel.sharding import make_mesh
  from prorl_jax.trainer import compiled
  from prorl_jax.trainer import train_step as ts

  model_cfg = presets.ModelConfig(**kw, remat=remat)
  mesh = make_mesh(1, 1, 1, devices=jax.devices()[:1])
  tx = ts.make_optimizer(1e-5)
  lc = ts.LossConfig(micro_batches=1, logit_chunk=t, is_correction="none")
  state = ts.create_train_state(
    model_cfg, tx, mesh, jax.random.PRNGKey(0), params=init_params(model_cfg, jax.random.PRNGKey(0))
  )
  rng = np.random.RandomState(0)
  mask = np.ones((b, t), np.int32)
  loss_mask = mask.copy()
  loss_mask[:, 0] = 0
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
  holder = {"state": state}

  def run():
    holder["state"], m = step(holder["state"], batch)
    jax.block_until_ready(m)

  return model_cfg, run


def torch_step(kw, b, t):
  """One call of transformers' Qwen2 fwd + bwd + AdamW on the same shapes."""
  import torch
  import transformers

  torch.set_num_threads(os.cpu_count() or 1)
  torch.manual_seed(0)
  hf = transformers.Qwen2Config(
    vocab_size=kw["vocab_size"],
    hidden_size=kw["hidden_size"],
    intermediate_size=kw["intermediate_size"],
    num_hidden_layers=kw["num_layers"],
    num_attention_heads=kw["num_heads"],
    num_key_value_heads=kw["num_kv_heads"],
    head_dim=kw["head_dim"],
    tie_word_embeddings=kw["tie_word_embeddings"],
    attn_implementation="sdpa",
  )
  model = transformers.Qwen2ForCausalLM(hf).train()
  opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01)
  ids = torch.randint(0, kw["vocab_size"], (b, t))

  def run():
    opt.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()

  return run


def aot_report():
  """Child process: lower + compile the qwen15b-shaped step on 8 fake devices, no weights."""
  import jax
  import numpy as np

  from prorl_jax.model import presets
  from prorl_jax.parallel.sharding import make_mesh
  from prorl_jax.trainer import compiled
  from prorl_jax.trainer import train_step as ts

  model_cfg = presets.r1_distill_qwen_1p5b(
    param_dtype="float32", compute_dtype="bfloat16", remat="full"
  )
  tx = ts.make_optimizer(1e-6)
  seqs, t, micro = 64, 9216, 8  # a slice of a mini-batch: 8 micro-batches of 8 sequences
  out = {}
  for name, shape in (("fsdp8", (1, 8, 1)), ("fsdp4_tensor2", (1, 4, 2))):
    mesh = make_mesh(*shape)
    st_sh = ts.state_shardings(model_cfg, tx, mesh)
    abstract_params = jax.eval_shape(lambda: ts.init_params(model_cfg, jax.random.PRNGKey(0)))
    abstract = jax.eval_shape(lambda p: ts._new_state(p, tx), abstract_params)
    abstract = jax.tree.map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, st_sh
    )
    lc = ts.LossConfig(micro_batches=seqs // micro, logit_chunk=1024)
    fn = compiled.jit_train_step(model_cfg, tx, lc, mesh, (seqs, t))
    batch = {
      k: jax.ShapeDtypeStruct(
        (seqs, t), np.int32 if k in ("tokens", "attn_mask", "loss_mask") else np.float32
      )
      for k in ts.BATCH_KEYS
    }
    t0 = time.perf_counter()
    compiled = fn.lower(abstract, batch).compile()
    mem = compiled.memory_analysis()
    gib = lambda x: round(x / 2**30, 2)  # noqa: E731
    out[name] = {
      "compile_s": round(time.perf_counter() - t0, 1),
      "argument_gib_per_device": gib(mem.argument_size_in_bytes),
      "output_gib_per_device": gib(mem.output_size_in_bytes),
      "temp_gib_per_device": gib(mem.temp_size_in_bytes),
      "alias_gib_per_device": gib(mem.alias_size_in_bytes),
    }
  out["shape"] = {"micro_batch_seqs": micro, "seq_len": t, "params": model_cfg.num_params}
  print(json.dumps(out))


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--reps", type=int, default=7, help="timed steps per side, in turns")
  ap.add_argument("--remat", default="dots", choices=("dots", "none", "full"))
  ap.add_argument("--skip-aot", action="store_true")
  ap.add_argument("--aot-child", action="store_true")
  args = ap.parse_args()
  if args.aot_child:
    return aot_report()
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  peak = matmul_peak()
  print(json.dumps({"matmul_f32_gflops": round(peak / 1e9, 1)}), flush=True)
  summary = {"matmul_f32_gflops": round(peak / 1e9, 1)}
  for name, (kw, b, t) in CONFIGS.items():
    model_cfg, jax_run = jax_step(kw, b, t, args.remat)
    times = interleaved({"jax": jax_run, "torch": torch_step(kw, b, t)}, args.reps)
    jt, tt = (statistics.median(times[k]) for k in ("jax", "torch"))
    flops = model_flops_per_token(model_cfg, t) * b * t
    row = {
      "config": name,
      "params": model_cfg.num_params,
      "batch": [b, t],
      "jax_remat": args.remat,
      "reps": args.reps,
      "jax_tokens_per_s": spread(times["jax"], b * t),
      "torch_tokens_per_s": spread(times["torch"], b * t),
      "ratio_vs_torch": round(tt / jt, 3),  # of the medians
      "ratio_vs_torch_best": round(min(times["torch"]) / min(times["jax"]), 3),
      "jax_model_gflops": round(flops / jt / 1e9, 1),
      "matmul_peak_fraction": round(flops / jt / peak, 3),
      "torch_matmul_peak_fraction": round(flops / tt / peak, 3),
    }
    print(json.dumps(row), flush=True)
    summary[name] = row
  larger = summary["qwen2_50M"]
  summary["ratio_vs_torch"] = larger["ratio_vs_torch"]
  summary["matmul_peak_fraction"] = larger["matmul_peak_fraction"]
  if not args.skip_aot:
    summary["aot_qwen15b"] = aot_child(__file__)
  print(json.dumps(summary))


if __name__ == "__main__":
  main()
