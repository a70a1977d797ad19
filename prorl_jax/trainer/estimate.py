"""Time estimates of a run's programs on a chip: FLOPs and HBM bytes counted from the model (the
compiler's cost analysis counts a loop's body once: a scan over 28 layers as one layer), a
roofline time per call (the larger of FLOPs / peak and bytes / bandwidth) and the step they add
up to. Every figure here is an estimate from published peak numbers, never a measurement.

Assumptions, each a parameter: the mean prompt and response lengths of a step's sequences,
the share of generated groups dynamic sampling keeps, the packed rows' fill.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os


@dataclasses.dataclass(frozen=True)
class Workload:
  """What one RL step holds (the run's config) and the assumed lengths."""

  responses: int  # prompts_per_step x n
  mean_prompt: int
  mean_response: int
  mini_batches: int
  epochs: int = 1
  keep_rate: float = 1.0  # kept groups / generated groups (dynamic sampling)
  fill: float = 0.95  # real tokens / slab tokens

  @property
  def seq_len(self) -> int:
    return self.mean_prompt + self.mean_response

  @property
  def tokens(self) -> int:
    return self.responses * self.seq_len


def matmul_params(model_cfg) -> tuple[int, int]:
  """(weights of the layers' matmuls, of the output head): 2 FLOPs each per token forward."""
  c = model_cfg
  attn = c.hidden_size * (c.num_heads + 2 * c.num_kv_heads) * c.head_dim
  attn += c.num_heads * c.head_dim * c.hidden_size
  mlp = 3 * c.hidden_size * c.intermediate_size
  return c.num_layers * (attn + mlp), c.hidden_size * c.vocab_size


def forward_flops(model_cfg, tokens: int, context: float) -> float:
  """Forward FLOPs of `tokens` tokens each attending to `context` keys on average."""
  layers, head = matmul_params(model_cfg)
  attn = 4 * model_cfg.num_layers * model_cfg.num_heads * model_cfg.head_dim * context
  return tokens * (2 * (layers + head) + attn)


def itemsize(dtype: str) -> int:
  return 2 if dtype in ("bfloat16", "float16") else 4


def program_cost(kind: str, shapes, work: Workload) -> tuple[float, float, int]:
  """(FLOPs, HBM bytes, tokens) of one call of a program on one device (its share of the
  mesh), counted from the model; see the module docstring."""
  c, n = shapes.model_cfg, shapes.mesh.size
  layers, head = matmul_params(c)
  weights = (layers + head) * itemsize(c.compute_dtype)
  if kind in ("accumulate", "logprob", "update"):
    rows, length = shapes.slab_shape or (shapes.rows, shapes.seq)
    tokens = rows * length // n
    fwd = forward_flops(c, tokens, min(work.seq_len, length) / 2)
    act = tokens * c.hidden_size * c.num_layers * itemsize(c.compute_dtype)
    if kind == "logprob":
      return fwd, weights + 4 * act, tokens
    passes = 3 + (1 if c.remat == "full" else 0)  # forward, two backward, a recomputed forward
    grads = 2 * 4 * (layers + head) / n  # the float32 accumulator read and written, its shard
    return fwd * passes, weights * passes + grads + 12 * act, tokens
  if kind == "decode":
    steps, slots = shapes.steps_per_sync, shapes.slots
    context = work.mean_prompt + work.mean_response / 2
    kv = 2 * c.num_layers * c.num_kv_heads * c.head_dim * itemsize(c.compute_dtype)
    flops = forward_flops(c, slots, context) * steps
    return flops, steps * (weights + slots * context * kv), steps * slots
  if kind == "prefill":
    return forward_flops(c, work.mean_prompt, work.mean_prompt / 2), weights, work.mean_prompt
  state = shapes.state_bytes
  return 0.0, 2.0 * state, 0  # apply, reset, layout: one pass over the state


def _per(amount: float, seconds: float | None) -> float | None:
  return amount / seconds if seconds else None


def roofline_s(flops: float, nbytes: float, chip) -> float:
  return max(flops / chip.peak_flops, nbytes / chip.hbm_bw)


@dataclasses.dataclass(frozen=True)
class Calibration:
  """The share of the roofline a chip reaches, with where each figure comes from: `mfu` for the
  compute-bound programs (update, log-probs), `bandwidth` for decode (None: not measured)."""

  mfu: float
  mfu_source: str
  bandwidth: float | None = None
  bandwidth_source: str = "no measurement of the decode loop on a chip: the bound only"


# The project's own measurement (bench/RESULTS.md, "GPU (H200)", 96ebf74, 2026-11-29): the 1.5B
# update on one H200 at 0.42 of its dense bf16 peak (cuDNN attention, full remat). It stands for
# NVIDIA GPUs. The decode loop has no current measurement on a chip: decode is the bound only.
MEASURED = Calibration(
  0.42,
  "measured: the 1.5B update on one H200, 0.42 of 989 TFLOP/s (bench/RESULTS.md, GPU (H200), "
  "96ebf74)",
)

_MAXTEXT = "https://github.com/AI-Hypercomputer/maxtext"
# Each TPU generation at the MFU MaxText publishes for its smallest dense model on that chip
# (pre-training: a larger model and batch than a 1.5B RL update, so an upper figure for ours;
# a run's own measurement replaces it, --calibration).
PUBLISHED = {
  "v4": Calibration(
    0.567, f"published: MaxText, a 22B model on 1x v4-128, 56.7% MFU ({_MAXTEXT}, README)"
  ),
  "v5e": Calibration(
    0.611,
    f"published: MaxText, a 16B model on 1x v5e-256, 61.10% MFU ({_MAXTEXT}, "
    "MaxText/configs/v5e/README.md)",
  ),
  "v5p": Calibration(
    0.6776, f"published: MaxText, a 32B model on v5p-128, 67.76% MFU ({_MAXTEXT}, README)"
  ),
  "v6e": Calibration(
    0.4546,
    f"published: MaxText, Llama 3.1 8B on v6e-256 at SL=8192, 45.46% MFU ({_MAXTEXT}, "
    "docs/reference/models/tiering.md)",
  ),
}


def calibration_for(chip_kind: str) -> Calibration:
  """The efficiency a chip's expected times assume when the user gives none: a TPU
  generation's published figure (`PUBLISHED`), else the project's H200 measurement."""
  return PUBLISHED.get(chip_kind, MEASURED)


def read_calibration(path: str) -> Calibration:
  """A calibration measured by `bench/gpu.py --out DIR` (its `gpu.jsonl`, or DIR itself): the
  best train stage's MFU; or a JSON object {"mfu": x, "bandwidth": y, "source": "..."}. A
  ValueError with one line when it holds neither."""
  file = os.path.join(path, "gpu.jsonl") if os.path.isdir(path) else path
  try:
    with open(file) as f:
      rows = [json.loads(line) for line in f if line.strip()]
  except (OSError, ValueError) as e:
    raise ValueError(f"--calibration={path}: cannot read it ({type(e).__name__})") from None
  mfus = [
    r["mfu_vs_989"]
    for r in rows
    if str(r.get("stage", "")).startswith("train_") and "mfu_vs_989" in r
  ]
  if mfus:
    return Calibration(max(mfus), f"measured by bench/gpu.py: {file}")
  if len(rows) == 1 and 0 < float(rows[0].get("mfu", 0)) <= 1:
    r = rows[0]
    bw = r.get("bandwidth")
    source = str(r.get("source", file))
    return Calibration(float(r["mfu"]), source, float(bw) if bw else None, source)
  raise ValueError(
    f"--calibration={path}: no train stage's mfu_vs_989 (bench/gpu.py --out) and no "
    '{"mfu": ..., "bandwidth": ..., "source": ...} object'
  )


def expected(bound: dict, cal: Calibration) -> dict:
  """The step's times at the calibrated efficiency beside the roofline bound (`bound`, from
  `step_estimate`): compute-bound programs at `cal.mfu` of peak, decode at `cal.bandwidth` of
  the HBM bandwidth (None where that is not measured)."""
  train = bound["train_s"] / cal.mfu
  logprob = bound["logprob_s"] / cal.mfu
  generate = bound["generate_s"]
  if generate is not None:
    generate = generate / cal.bandwidth if cal.bandwidth else None
  known = generate is not None or bound["generate_s"] is None
  return {
    "train_s": train,
    "logprob_s": logprob,
    "generate_s": generate,
    "step_s": train + logprob + (generate or 0.0) if known else None,
    "train_tokens_per_s_per_chip": (bound["train_tokens_per_s_per_chip"] or 0) * cal.mfu or None,
    "mfu": cal.mfu,
    "mfu_source": cal.mfu_source,
    "bandwidth": cal.bandwidth,
    "bandwidth_source": cal.bandwidth_source,
  }


def step_estimate(times: dict, shapes, work: Workload, chip, hosts: int) -> dict:
  """Seconds per RL step from per-call roofline times (`times`: program kind -> s), and the
  throughputs they imply. The vLLM layout's generation is not a JAX program: its time is left
  out (`generate_s` None) and said so."""
  slab_tokens = (shapes.slab_shape[0] * shapes.slab_shape[1]) if shapes.slab_shape else None
  per_batch = shapes.rows * shapes.seq
  calls = (
    math.ceil(work.tokens / (slab_tokens * work.fill))
    if slab_tokens
    else math.ceil(work.responses / shapes.rows)
  )
  train_kind = "accumulate" if slab_tokens else "update"
  train_s = work.epochs * calls * times.get(train_kind, 0.0)
  train_s += work.epochs * work.mini_batches * times.get("apply", 0.0)
  logprob_s = 2 * calls * times.get("logprob", 0.0)  # the old and the reference policy
  tokens_per_call = (slab_tokens or per_batch) / shapes.mesh.size
  out = {
    "train_tokens_per_s_per_chip": _per(tokens_per_call, times.get(train_kind)),
    "train_s": train_s,
    "logprob_s": logprob_s,
    "generate_s": None,
    "decode_tokens_per_s_per_chip": None,
  }
  if times.get("decode"):
    per_call = shapes.slots * shapes.steps_per_sync
    host_rate = per_call / times["decode"]  # every device of a host runs the host's slots
    out["decode_tokens_per_s_per_chip"] = host_rate * hosts / shapes.mesh.size
    generated = work.responses * work.mean_response / work.keep_rate
    out["generate_s"] = generated / (host_rate * hosts)
  out["step_s"] = train_s + logprob_s + (out["generate_s"] or 0.0)
  return out
