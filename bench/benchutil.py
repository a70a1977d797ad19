"""Helpers shared by the benchmarks: median wall time, interleaved A/B timing, model FLOPs per
token, the models they run, ProRL-shaped lengths, and the AOT child process on a fake 8-device
CPU mesh."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

H200_BF16_DENSE = 989e12  # the datasheet's dense bf16 FLOP/s, the MFU's denominator


def aot_child(script: str) -> dict:
  """Runs `script --aot-child` with 8 fake CPU devices (the device count is fixed when jax is
  imported, hence a subprocess); its last stdout line as JSON, or {"error": its stderr tail}."""
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
  res = subprocess.run(
    [sys.executable, script, "--aot-child"], env=env, capture_output=True, text=True, check=False
  )
  if res.returncode:
    return {"error": res.stderr.strip().splitlines()[-3:]}
  return json.loads(res.stdout.strip().splitlines()[-1])


def median_time(fn, reps: int = 3) -> float:
  """Median seconds of `reps` calls of `fn`, after one untimed call (compile / warm-up)."""
  fn()
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return statistics.median(times)


def interleaved(arms: dict, reps: int = 5) -> dict[str, list[float]]:
  """Seconds of each of `reps` calls of every arm, the arms taking turns (A B C, B C A, ...)
  after one untimed call each, so that a slow phase of a shared machine hits every arm alike."""
  names = list(arms)
  for name in names:
    arms[name]()
  times = {name: [] for name in names}
  for r in range(reps):
    for name in names[r % len(names) :] + names[: r % len(names)]:
      t0 = time.perf_counter()
      arms[name]()
      times[name].append(time.perf_counter() - t0)
  return times


def spread(seconds: list[float], work: float = 1.0, digits: int = 1) -> dict:
  """`work` per second of the fastest call ("best") and of the median call ("median")."""
  return {
    "best": round(work / min(seconds), digits),
    "median": round(work / statistics.median(seconds), digits),
  }


def model_flops_per_token(model_cfg, seq: int) -> int:
  """6·N for the matmul weights (embedding lookup excluded) + attention scores/values."""
  n = model_cfg.num_params - (
    0 if model_cfg.tie_word_embeddings else model_cfg.vocab_size * model_cfg.hidden_size
  )
  return 6 * n + 12 * model_cfg.num_layers * seq * model_cfg.num_heads * model_cfg.head_dim


def small_cfg(impl):
  from prorl_jax.model import presets

  return presets.ModelConfig(
    vocab_size=1024,
    hidden_size=256,
    intermediate_size=512,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=64,
    param_dtype="float32",
    compute_dtype="bfloat16",
    attention_impl=impl,
  )


def big_cfg(impl, args, remat="full"):
  from prorl_jax.model import presets

  if args.smoke:
    return small_cfg(impl).replace(remat=remat)
  return presets.r1_distill_qwen_1p5b(
    param_dtype="float32", compute_dtype="bfloat16", remat=remat, attention_impl=impl
  )


def sampler_shape(args, batch=None):
  """(batch, prompt, new tokens) of the sampler stages."""
  return (batch or 8, 32, 32) if args.smoke else (batch or args.gen_batch, 256, args.gen_tokens)


def rl_cfg(args, **kw):
  """`big_cfg` of attention `impl` (a keyword, default xla) with the other keywords replaced."""
  return big_cfg(kw.pop("impl", "xla"), args).replace(**kw)


def prorl_lengths(rng, n: int, median: float = 2000.0, cap: int = 8192, scale: int = 1):
  """(prompt, response) token counts: prompts 50-400, responses log-normal around `median`
  (sigma 0.6), 7% cut at `cap`; all divided by `scale`."""
  prompt = rng.randint(50, 401, size=n)
  resp = rng.lognormal(mean=np.log(median), sigma=0.6, size=n)
  resp = np.where(rng.rand(n) < 0.07, cap, np.minimum(resp, cap))
  return np.maximum(prompt // scale, 1), np.maximum(resp // scale, 1).astype(int)


def hf_sample(model, ids, new_tokens: int) -> None:
  """transformers `generate` of exactly `new_tokens` tokens after each row of `ids`, sampled at
  temperature 1 with neither top-k nor top-p: the work the JAX sampler is timed on."""
  import torch

  with torch.no_grad():
    model.generate(
      ids,
      attention_mask=torch.ones_like(ids),
      do_sample=True,
      temperature=1.0,
      top_p=1.0,
      top_k=0,
      max_new_tokens=new_tokens,
      min_new_tokens=new_tokens,
      pad_token_id=0,
    )


def build_random_base(path: str, smoke: bool) -> str:
  """An HF directory: the demo's character tokenizer and random weights of the 1.5B shape (or
  `small_cfg` with --smoke). Its vocabulary (151,936 rows; 1,024 small) dwarfs the tokenizer's 23
  ids, so end-of-sequence is rare and responses run to the length limit, as long reasoning
  traces do."""
  import jax

  from prorl_jax.demo import tiny_base
  from prorl_jax.model import init_params, presets, save_hf

  if os.path.isfile(os.path.join(path, "config.json")):
    return path
  tmp = path.rstrip("/") + ".tmp"
  tok = tiny_base.build_tokenizer(tmp)
  ids = {"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id}
  model_cfg = small_cfg("xla").replace(**ids) if smoke else presets.r1_distill_qwen_1p5b(**ids)
  params = init_params(model_cfg, jax.random.PRNGKey(0))
  save_hf(model_cfg, params, tmp, tokenizer_dir=tmp, dtype="bfloat16")
  os.replace(tmp, path)
  return path
