"""Packed vs padded micro-batches for the trainer's update, in one run; prints JSON lines.

  python bench/packing.py [--reps 4] [--skip-aot]

Lengths are ProRL-shaped and scaled down 16x for the CPU: a prompt of 50-400 tokens and a
response drawn log-normal around 2,000 tokens (most between 1K and 4K), a tail to the 8,192 cap
and 7% of responses truncated at the cap — then divided by 16 (prompt cap 64, response cap 512).
Each step's mini-batch is 64 such sequences, laid out as the trainer does it:
  padded  [64, Tp + Tr] (widths of the step's longest prompt and response, rounded up to 16)
          in 8 micro-batches of 8 sequences;
  packed  first-fit decreasing into slabs of 4 rows x 1,024 tokens (`rollout.token_budget`
          4096, `rollout.pack_row_len` 1024) — as many slabs as the step needs.
Both run the real update (`compiled.jit_train_step` / `PackedTrainStep`, AdamW) on the same
random Qwen2 and the same sequences, interleaved rep by rep; the metric is trained (non-pad)
tokens per second. Then, in a subprocess on 8 fake CPU devices (fsdp 8), the per-device memory
of the DeepSeek-R1-Distill-Qwen-1.5B update from an AOT compile: packed at a 16K-token budget
against padded micro-batches of 8 x 9,216. Then the trainer's default layout, one packed row per
device (16,384 tokens, here 1,024), with attention blocks that see the whole row against blocks
that look back only the longest sequence (`attention_window`). The last line is one JSON object
with `packed_vs_padded` and `window.windowed_vs_whole_row` (medians over reps of the per-rep
ratios).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchutil import aot_child  # noqa: E402

MODEL = dict(
  vocab_size=4096,
  hidden_size=256,
  intermediate_size=768,
  num_layers=4,
  num_heads=4,
  num_kv_heads=2,
  head_dim=64,
  tie_word_embeddings=False,
)
SCALE = 16
ROWS, PROMPT_CAP, RESPONSE_CAP = 64, 1024 // SCALE, 8192 // SCALE
SLAB = (4, 1024)
MICRO = 8


def lengths(rng, n):
  """(prompt, response) token counts at full scale divided by SCALE; 7% truncated at the cap."""
  prompt = rng.randint(50, 401, size=n)
  resp = rng.lognormal(mean=7.6, sigma=0.6, size=n)  # median ~2,000 tokens
  resp = np.where(rng.rand(n) < 0.07, 8192, np.minimum(resp, 8192))
  return np.maximum(prompt // SCALE, 1), np.maximum(resp // SCALE, 1).astype(int)


def padded_batch(rng, vocab):
  p, r = lengths(rng, ROWS)
  tp = min(PROMPT_CAP, -(-int(p.max()) // 16) * 16)
  tr = min(RESPONSE_CAP, -(-int(r.max()) // 16) * 16)
  pos = np.arange(tp + tr)[None]
  attn = ((pos >= tp - p[:, None]) & (pos < tp + r[:, None])).astype(np.int32)
  loss = ((pos >= tp) & (pos < tp + r[:, None])).astype(np.int32)
  tokens = np.where(attn > 0, rng.randint(3, vocab, size=attn.shape), 0).astype(np.int32)
  f = lambda s: (rng.randn(*attn.shape) * s).astype(np.float32) * loss  # noqa: E731
  old = f(0.3) - 3.0
  return {
    "tokens": tokens,
    "attn_mask": attn,
    "loss_mask": loss,
    "old_logp": old,
    "ref_logp": old + f(0.1),
    "gen_logp": old + f(0.1),
    "adv": f(1.0),
  }, (int(p.mean()), int(r.mean()), float((r >= RESPONSE_CAP).mean()))


def throughput(reps: int) -> dict:
  import jax

  from prorl_jax.algo import packing
  from prorl_jax.model import init_params, presets
  from prorl_jax.parallel.sharding import make_mesh
  from prorl_jax.trainer import compiled
  from prorl_jax.trainer import train_step as ts

  model_cfg = presets.ModelConfig(**MODEL, remat="dots")
  mesh = make_mesh(1, 1, 1, devices=jax.devices()[:1])
  tx = ts.make_optimizer(1e-5)
  params = init_params(model_cfg, jax.random.PRNGKey(0))
  rng = np.random.RandomState(0)
  batches = [padded_batch(rng, model_cfg.vocab_size) for _ in range(reps + 1)]
  padded_steps, packed = (
    {},
    ts.PackedTrainStep(model_cfg, tx, ts.LossConfig(logit_chunk=512), mesh, SLAB),
  )
  state = {"pad": None, "pack": None}
  fresh = lambda: ts.create_train_state(model_cfg, tx, mesh, jax.random.PRNGKey(1), params=params)  # noqa: E731

  def run_padded(b):
    shape = b["tokens"].shape
    if shape not in padded_steps:
      lc = ts.LossConfig(micro_batches=ROWS // MICRO, logit_chunk=512)
      padded_steps[shape] = compiled.jit_train_step(model_cfg, tx, lc, mesh, shape)
    state["pad"] = state["pad"] or fresh()
    t0 = time.perf_counter()
    state["pad"], m = padded_steps[shape](state["pad"], b)
    jax.block_until_ready(m)
    return time.perf_counter() - t0, float(m["actor/loss"])

  def run_packed(b):
    state["pack"] = state["pack"] or fresh()
    t0 = time.perf_counter()
    p = packing.plan(b["attn_mask"], b["loss_mask"], length=SLAB[1], rows=SLAB[0])
    slabs = packing.slabs(p, b, ts.PER_TOKEN_KEYS)
    lm = b["loss_mask"]
    state["pack"], m = packed(state["pack"], slabs, (lm.sum(), (lm.sum(1) > 0).sum()))
    jax.block_until_ready(m)
    return time.perf_counter() - t0, float(m["actor/loss"]), p

  rows = []
  for i, (b, (pm, rm, trunc)) in enumerate(batches):
    real = int(b["attn_mask"].sum())
    # the first pass of each layout compiles its functions; only later passes are timed
    if i == 0 or b["tokens"].shape not in padded_steps:
      run_padded(b)
    if i == 0:
      run_packed(b)
      continue
    order = (run_padded, run_packed) if i % 2 else (run_packed, run_padded)
    res = {f.__name__: f(b) for f in order}
    (tpad, loss_pad), (tpack, loss_pack, p) = res["run_padded"], res["run_packed"]
    row = {
      "rep": i,
      "padded_shape": list(b["tokens"].shape),
      "real_tokens": real,
      "padded_fill": round(real / b["tokens"].size, 3),
      "packed_slabs": p.slabs,
      "packed_fill": round(p.fill_fraction, 3),
      "mean_prompt": pm,
      "mean_response": rm,
      "truncated": round(trunc, 3),
      "padded_tokens_per_s": round(real / tpad, 1),
      "packed_tokens_per_s": round(real / tpack, 1),
      "ratio": round(tpad / tpack, 3),
      "loss_padded": loss_pad,
      "loss_packed": loss_pack,
    }
    print(json.dumps(row), flush=True)
    rows.append(row)
  ratios = [r["ratio"] for r in rows]
  return {
    "params": model_cfg.num_params,
    "packed_vs_padded": round(statistics.median(ratios), 3),
    "packed_vs_padded_min": min(ratios),
    "reps": len(rows),
  }


def window(reps: int) -> dict:
  """The trainer's default layout — one packed row per device (`rollout.token_budget`,
  `pack_row_len` 0) — scaled 16x down: rows of 1,024 tokens, attention blocks of 64 queries,
  sequences of up to 576 tokens. Blocks that see the whole row vs blocks that look back 576
  (`attention_window`, what the trainer sets), on the same slabs, interleaved."""
  import jax

  from prorl_jax.algo import packing
  from prorl_jax.model import init_params, presets
  from prorl_jax.parallel.sharding import make_mesh
  from prorl_jax.trainer import train_step as ts

  slab = (1, 16384 // SCALE)
  base = presets.ModelConfig(**MODEL, remat="dots", attention_chunk=1024 // SCALE)
  cfgs = {"whole_row": base, "windowed": base.replace(attention_window=PROMPT_CAP + RESPONSE_CAP)}
  mesh = make_mesh(1, 1, 1, devices=jax.devices()[:1])
  tx = ts.make_optimizer(1e-5)
  params = init_params(base, jax.random.PRNGKey(0))
  lc = ts.LossConfig(logit_chunk=512)
  steps = {k: ts.PackedTrainStep(c, tx, lc, mesh, slab) for k, c in cfgs.items()}
  states = {
    k: ts.create_train_state(base, tx, mesh, jax.random.PRNGKey(1), params=params) for k in cfgs
  }
  rng = np.random.RandomState(1)
  rows = []
  for i in range(reps + 1):
    b, _ = padded_batch(rng, base.vocab_size)
    p = packing.plan(b["attn_mask"], b["loss_mask"], length=slab[1], rows=slab[0])
    slabs = packing.slabs(p, b, ts.PER_TOKEN_KEYS)
    lm = b["loss_mask"]
    counts = (lm.sum(), (lm.sum(1) > 0).sum())
    got = {}
    for k in ("whole_row", "windowed") if i % 2 else ("windowed", "whole_row"):
      t0 = time.perf_counter()
      states[k], m = steps[k](states[k], slabs, counts)
      jax.block_until_ready(m)
      got[k] = (time.perf_counter() - t0, float(m["actor/loss"]))
    if i == 0:  # compiles
      continue
    real = int(b["attn_mask"].sum())
    row = {
      "rep": i,
      "slabs": p.slabs,
      "real_tokens": real,
      "whole_row_tokens_per_s": round(real / got["whole_row"][0], 1),
      "windowed_tokens_per_s": round(real / got["windowed"][0], 1),
      "ratio": round(got["whole_row"][0] / got["windowed"][0], 3),
      "loss_whole_row": got["whole_row"][1],
      "loss_windowed": got["windowed"][1],
    }
    print(json.dumps(row), flush=True)
    rows.append(row)
  ratios = [r["ratio"] for r in rows]
  return {
    "windowed_vs_whole_row": round(statistics.median(ratios), 3),
    "windowed_vs_whole_row_min": min(ratios),
    "reps": len(rows),
  }


def aot_report():
  """Child: the 1.5B update compiled for 8 fake CPU devices (fsdp 8), per-device memory."""
  import jax

  from prorl_jax.model import presets
  from prorl_jax.parallel.sharding import make_mesh
  from prorl_jax.trainer import compiled
  from prorl_jax.trainer import train_step as ts

  mesh = make_mesh(1, 8, 1)
  tx = ts.make_optimizer(1e-6)
  gib = lambda x: round(x / 2**30, 2)  # noqa: E731
  out = {}
  for chunk in (512, 1024, 0):
    model_cfg = presets.r1_distill_qwen_1p5b(
      param_dtype="float32", compute_dtype="bfloat16", remat="full", attention_chunk=chunk
    )
    st_sh = ts.state_shardings(model_cfg, tx, mesh)
    abstract = jax.eval_shape(
      lambda: ts._new_state(ts.init_params(model_cfg, jax.random.PRNGKey(0)), tx)
    )
    abstract = jax.tree.map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, st_sh
    )
    lc = ts.LossConfig(micro_batches=8, logit_chunk=1024)
    nbytes = lambda tree: sum(  # noqa: E731
      a.size * a.dtype.itemsize // 8 for a in jax.tree.leaves(tree)
    )  # per device: every array here is split 8 ways (or tiny)
    seqs, t = 64, 9216
    batch = {
      k: jax.ShapeDtypeStruct((seqs, t), np.float32 if k in ts.FLOAT_KEYS else np.int32)
      for k in ts.BATCH_KEYS
    }
    m = compiled.jit_train_step(model_cfg, tx, lc, mesh, (seqs, t)).lower(abstract, batch).compile()
    m = m.memory_analysis()
    # the padded step's arguments are the whole state (params, reference, Adam) and the batch
    padded = m.argument_size_in_bytes + m.temp_size_in_bytes
    slab = (8, 16384)
    step = ts.PackedTrainStep(model_cfg, tx, lc, mesh, slab)
    slab_args = {
      k: jax.ShapeDtypeStruct(slab, np.float32 if k in ts.FLOAT_KEYS else np.int32)
      for k in ts.PACKED_KEYS
    }
    counts = (jax.ShapeDtypeStruct((), np.float32),) * 2
    acc = jax.eval_shape(step._zeros, abstract.params, counts)
    acc = jax.tree.map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
      acc,
      (st_sh.params, jax.tree.map(lambda _: ts.sharding.replicated(mesh), acc[1])),
    )
    a = step._add.lower(abstract.params, acc, slab_args, counts).compile().memory_analysis()
    # live while a slab is added: the whole state, the gradient accumulator, the slab, temps
    packed = nbytes(abstract) + nbytes(acc[0]) + nbytes(slab_args) + a.temp_size_in_bytes
    out[f"attention_chunk_{chunk}"] = {
      "padded_8x9216_gib": gib(padded),
      "packed_16384_gib": gib(packed),
      "packed_temp_gib": gib(a.temp_size_in_bytes),
      "padded_temp_gib": gib(m.temp_size_in_bytes),
    }
  out["params"] = presets.r1_distill_qwen_1p5b().num_params
  print(json.dumps(out))


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--reps", type=int, default=4)
  ap.add_argument("--skip-aot", action="store_true")
  ap.add_argument("--aot-child", action="store_true")
  args = ap.parse_args()
  if args.aot_child:
    return aot_report()
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  summary = throughput(args.reps)
  summary["window"] = window(args.reps)
  if not args.skip_aot:
    summary["aot_qwen15b_fsdp8"] = aot_child(__file__)
  print(json.dumps(summary))


if __name__ == "__main__":
  main()
