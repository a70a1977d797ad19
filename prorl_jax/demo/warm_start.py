"""The CPU demo's base model: tiny Qwen2 + a short supervised warm start on chain sums.

Kept short on purpose: RL needs room, and groups that are all correct carry no
signal. Built once into `<run_dir>/base` as an ordinary HF directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from prorl_jax.demo import chain_sum, tiny_base
from prorl_jax.model import forward, load_hf, load_tokenizer, save_hf

log = logging.getLogger(__name__)


def _sft_batch(tok, src, batch: int, length: int):
  toks = np.full((batch, length), tok.pad_token_id, np.int32)
  loss_mask = np.zeros((batch, length), np.float32)
  for i in range(batch):
    it = src.next()
    comp = tok.encode(it.solution, add_special_tokens=False) + [tok.eos_token_id]
    seq = (list(it.prompt_ids) + comp)[:length]
    toks[i, : len(seq)] = seq
    loss_mask[i, len(it.prompt_ids) : len(seq)] = 1
  return toks, loss_mask


def cache_dir() -> str:
  """Where built demo bases are kept for every run dir: $PRORL_CACHE_DIR, else
  ~/.cache/prorl_jax."""
  return os.environ.get("PRORL_CACHE_DIR") or os.path.join(
    os.path.expanduser("~"), ".cache", "prorl_jax"
  )


def cached(seed: int = 0, **settings) -> str:
  """The demo's warm-started base for these build settings, built once into the cache and
  reused by any run dir. The key names the settings and the builder's own source (a changed
  builder builds anew); a lock keeps two runs from building it at once."""

  here = os.path.dirname(os.path.abspath(__file__))
  code = b"".join(
    open(os.path.join(here, n), "rb").read() for n in ("warm_start.py", "tiny_base.py")
  )
  args = dict(seed=seed, **settings)
  key = "-".join(f"{k}{v}" for k, v in sorted(args.items())) or "default"
  path = os.path.join(cache_dir(), f"tiny-base-{key}-{hashlib.sha256(code).hexdigest()[:12]}")
  os.makedirs(cache_dir(), exist_ok=True)
  with open(path + ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    return build(path, **args)


def build(
  path: str, *, seed: int = 0, steps: int = 200, batch: int = 64, lr: float = 1e-3, length: int = 56
) -> str:
  """Tokenizer + tiny Qwen2 + supervised warm start, in `path` (skipped if already built)."""
  if os.path.isfile(os.path.join(path, "config.json")):
    return path
  scratch = path.rstrip("/") + ".scratch"
  shutil.rmtree(scratch, ignore_errors=True)
  tiny_base.build(scratch, seed=seed)
  model_cfg, params = load_hf(scratch)
  tok = load_tokenizer(scratch)
  heldout = {it.prompt for it in chain_sum.chain_sum_heldout(tok, 1000)}
  src = chain_sum.ChainSumSource(tok, seed=seed * 7919 + 1, exclude=heldout)
  sched = optax.warmup_cosine_decay_schedule(0.0, lr, min(50, steps // 4), steps, lr * 0.1)
  tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.01))
  opt = tx.init(params)

  @jax.jit
  def step(params, opt, toks, mask):
    def loss_fn(p):
      logits = forward(model_cfg, p, toks)
      lp = jax.nn.log_softmax(logits[:, :-1], -1)
      nll = -jnp.take_along_axis(lp, toks[:, 1:, None], -1)[..., 0]
      return jnp.sum(nll * mask[:, 1:]) / jnp.sum(mask[:, 1:])

    loss, g = jax.value_and_grad(loss_fn)(params)
    upd, opt = tx.update(g, opt, params)
    return optax.apply_updates(params, upd), opt, loss

  t0 = time.time()
  for i in range(steps):
    toks, mask = _sft_batch(tok, src, batch, length)
    params, opt, loss = step(params, opt, toks, mask)
    if i % 50 == 0 or i == steps - 1:
      log.info("warm start step %d/%d loss %.3f", i + 1, steps, float(loss))
  log.info("warm start: %d steps in %.1fs", steps, time.time() - t0)
  save_hf(model_cfg, params, scratch, tokenizer_dir=scratch)
  os.replace(scratch, path)
  return path
