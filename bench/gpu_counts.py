"""The RL stages of bench/gpu.py that count on the CPU where a step's hardware time goes: the
cause of a slow packed step or a slow decode step is visible without a GPU.

  python bench/gpu.py --stages=pairs,decode_ops --out DIR

Stages (each one JSON line; with --smoke a small model and short lengths):
  pairs       attention score pairs of one ProRL-shaped mini-batch (64 sequences: prompts of
              50-400 tokens, responses log-normal around 2,000, 7% cut at 8,192) per layout:
              padded micro-batches, packed rows through the cuDNN path (its dense [T, T] mask),
              packed rows through the windowed XLA blocks, and what the segments themselves hold.
              The XLA counts are read from the compiled program (cost analysis), not assumed.
  decode_ops  the compiled static decode loop's body: instructions, fusions, custom calls
              (library matmuls), and the instructions that touch the vocabulary (the sampler's
              passes over it), for one layer and for the whole model.
"""

from __future__ import annotations

import numpy as np
from benchutil import prorl_lengths, rl_cfg

# ---------------------------------------------------------------------------------------- pairs


def _compiled_pairs(t: int, seg: np.ndarray, chunk: int, window: int, h: int = 2, dh: int = 128):
  """Score pairs the compiled XLA segment attention of one [1, t] row computes: the FLOPs of its
  program (cost analysis; a loop's body counted once, so times its trip count, the number of
  query blocks) over the 4·H·Dh FLOPs of one pair (scores and values; at Dh 128 the softmax's
  few FLOPs per pair are under 2% of them)."""
  import jax
  import jax.numpy as jnp

  from prorl_jax.model.attention import xla_segment_attention

  x = jax.ShapeDtypeStruct((1, t, h, dh), jnp.float32)
  f = jax.jit(lambda q, k, v, s: xla_segment_attention(q, k, v, s, chunk, window))
  cost = f.lower(x, x, x, jnp.asarray(seg[None])).compile().cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  trips = -(-t // chunk) if chunk and t > chunk else 1
  return cost["flops"] * trips / (4 * h * dh)


def stage_pairs(args):
  from prorl_jax.algo import packing

  scale = 16 if args.smoke else 1
  rows, row_len, micro, chunk = 64, 16384 // scale, 8, 1024 // scale
  rng = np.random.RandomState(0)
  p, r = prorl_lengths(rng, rows, scale=scale)
  tp, tr = int(p.max()), int(r.max())
  pos = np.arange(tp + tr)[None]
  attn = ((pos >= tp - p[:, None]) & (pos < tp + r[:, None])).astype(np.int32)
  loss = ((pos >= tp) & (pos < tp + r[:, None])).astype(np.int32)
  plan = packing.plan(attn, loss, length=row_len, rows=1)
  seg = plan.segment_ids.reshape(-1, row_len)  # [rows of all slabs, L]
  n = (p + r).astype(np.int64)
  window = int(n.max())
  t = tp + tr
  # rows as long as the longest sequence a config allows (prompt cap + response cap), as many
  # per slab as the budget holds: what cuDNN's dense mask costs when a row is no longer than that
  short_len = -(-(401 // scale + 8192 // scale) // 128) * 128
  short = packing.plan(attn, loss, length=short_len, rows=1)
  xla_row = {"whole_row": _compiled_pairs(row_len, seg[0], chunk, 0)}
  xla_row["windowed"] = _compiled_pairs(row_len, seg[0], chunk, window)
  out = {
    "sequences": rows,
    "real_tokens": int(n.sum()),
    "padded_shape": [rows, t],
    "packed_rows": int(seg.shape[0]),
    "row_len": row_len,
    "longest_sequence": window,
    "pairs": {
      "segments_causal": int((n * (n + 1) // 2).sum()),
      "padded_causal": int(rows * t * (t + 1) // 2),
      "padded_full": int(rows * t * t),
      "packed_cudnn_dense_mask": int(seg.shape[0] * row_len * row_len),
      "packed_cudnn_causal": int(seg.shape[0] * row_len * (row_len + 1) // 2),
      "packed_rows_of_longest_cudnn_causal": int(short.slabs * short_len * (short_len + 1) // 2),
      "packed_xla_whole_row": int(seg.shape[0] * xla_row["whole_row"]),
      "packed_xla_windowed": int(seg.shape[0] * xla_row["windowed"]),
    },
    "micro_batches_padded": rows // micro,
    "rows_of_longest": {"rows": int(short.slabs), "row_len": short_len},
  }
  base = out["pairs"]["padded_causal"]
  out["vs_padded_causal"] = {k: round(v / base, 3) for k, v in out["pairs"].items()}
  return out


# ----------------------------------------------------------------------------------- decode_ops


def _loop_body_ops(hlo: str, vocab: int) -> dict:
  """Counts in the compiled decode loop's body (instructions whose metadata names a while body
  outside the model's layer scan): all, fusions, custom calls, and those with a vocabulary-sized
  dimension."""
  import re

  counts = {"instructions": 0, "fusions": 0, "custom_calls": 0, "touch_vocab": 0}
  for line in hlo.split("\n"):
    op = re.search(r'op_name="([^"]*)"', line)
    if not (op and re.search(r"(?<!Decoder)/while/body", op.group(1)) and " = " in line):
      continue
    counts["instructions"] += 1
    counts["fusions"] += " fusion(" in line
    counts["custom_calls"] += " custom-call(" in line
    counts["touch_vocab"] += bool(re.search(rf"\[[\d,]*\b{vocab}\b[\d,]*\]", line.split("(")[0]))
  return counts


def stage_decode_ops(args):
  import jax
  import jax.numpy as jnp

  from prorl_jax.model import init_params
  from prorl_jax.records import SamplingParams
  from prorl_jax.rollout.engines import jax_sampler

  out = {}
  for layers in (1, 2):  # one layer's share, and the fixed part (embedding, head, sampler)
    model_cfg = rl_cfg(args, param_dtype="bfloat16", remat="none", num_layers=layers)
    if not args.smoke:  # the 1.5B layer on the device; compiled with abstract weights
      model_cfg = model_cfg.replace(num_layers=layers)
    params = jax.eval_shape(lambda: init_params(model_cfg, jax.random.PRNGKey(0)))
    w = jax.eval_shape(lambda p: jax_sampler.prepare(model_cfg, p), params)
    b, t = 8, 64
    ones = jax.ShapeDtypeStruct((b, t), jnp.int32)
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    limit = jax.ShapeDtypeStruct((b,), jnp.int32)
    sp = SamplingParams(max_new_tokens=16, temperature=1.0, top_p=0.95)
    lowered = jax_sampler._generate.lower(
      params, w, ones, ones, key, limit, model_cfg=model_cfg, sp=sp, pad_id=0
    )
    out[f"layers_{layers}"] = _loop_body_ops(lowered.compile().as_text(), model_cfg.vocab_size)
  one, two = out["layers_1"], out["layers_2"]
  per_layer = {k: two[k] - one[k] for k in one}
  fixed = {k: one[k] - per_layer[k] for k in one}
  full = rl_cfg(args).num_layers
  return {
    "backend": jax.default_backend(),
    "per_layer": per_layer,
    "fixed_per_step": fixed,
    "model_layers": full,
    "instructions_per_step": fixed["instructions"] + full * per_layer["instructions"],
    "custom_calls_per_step": fixed["custom_calls"] + full * per_layer["custom_calls"],
  }


STAGES = {"pairs": stage_pairs, "decode_ops": stage_decode_ops}
# x
