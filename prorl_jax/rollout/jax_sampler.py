"""Batched generation with a KV cache: jitted prefill, then a jitted decode loop.

Prompts are left-padded into a shape bucket (batch and prompt length rounded up), so the whole
generate function compiles once per bucket and sampling settings, not per call. Returns response
tokens, the log-prob of each sampled token under the sampling distribution (logits/temperature,
after top-k/top-p filtering), and a finish reason per row (`stop` / `length`).

Legend: B batch, P padded prompt length, N max new tokens, S = P + N cache slots, V vocab.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from prorl_jax.model import Qwen2, head_weight
from prorl_jax.model.presets import Qwen2Config


@dataclasses.dataclass(frozen=True)
class SamplingParams:
  max_new_tokens: int = 256
  temperature: float = 1.0  # 0 = greedy
  top_p: float = 1.0
  top_k: int = 0  # 0 = off
  stop_token_ids: tuple[int, ...] = ()


def _bucket(x: int, multiple: int) -> int:
  return max(multiple, -(-x // multiple) * multiple)


def filter_logits(logits_BxV, top_k: int, top_p: float):
  """Masks logits outside the top-k / nucleus (top-p) set to -inf; the best token always stays."""
  if top_k > 0:
    kth = jax.lax.top_k(logits_BxV, top_k)[0][:, -1:]
    logits_BxV = jnp.where(logits_BxV < kth, -jnp.inf, logits_BxV)
  if top_p < 1.0:
    order = jnp.argsort(-logits_BxV, axis=-1)
    sorted_l = jnp.take_along_axis(logits_BxV, order, axis=-1)
    probs = jax.nn.softmax(sorted_l, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs  # mass of the strictly better tokens
    drop_sorted = before >= top_p
    drop = jnp.zeros_like(drop_sorted).at[jnp.arange(order.shape[0])[:, None], order].set(
        drop_sorted)
    logits_BxV = jnp.where(drop, -jnp.inf, logits_BxV)
  return logits_BxV


def _sample(logits_BxV, rng, sp: SamplingParams):
  """(token, log-prob under the sampling distribution) per row."""
  logits_BxV = logits_BxV.astype(jnp.float32)
  if sp.temperature == 0.0:
    tok = jnp.argmax(logits_BxV, axis=-1)
    lp = jax.nn.log_softmax(logits_BxV, axis=-1)
  else:
    z = filter_logits(logits_BxV / sp.temperature, sp.top_k, sp.top_p)
    tok = jax.random.categorical(rng, z, axis=-1)
    lp = jax.nn.log_softmax(z, axis=-1)
  return tok.astype(jnp.int32), jnp.take_along_axis(lp, tok[:, None], axis=-1)[:, 0]


@functools.partial(jax.jit, static_argnames=("cfg", "sp", "pad_id"))
def _generate(params, prompt_BxP, prompt_mask_BxP, rng, *, cfg: Qwen2Config, sp: SamplingParams,
              pad_id: int):
  b, p = prompt_BxP.shape
  n = sp.max_new_tokens
  s = p + n
  model = Qwen2(cfg)
  dt = jnp.dtype(cfg.compute_dtype)
  cache = (jnp.zeros((cfg.num_layers, b, s, cfg.num_kv_heads, cfg.head_dim), dt),) * 2
  key_valid_BxS = jnp.zeros((b, s), bool).at[:, :p].set(prompt_mask_BxP.astype(bool))
  positions_BxP = jnp.maximum(jnp.cumsum(prompt_mask_BxP, axis=-1) - 1, 0)
  causal_PxS = jnp.arange(s)[None, :] <= jnp.arange(p)[:, None]
  mask_BxPxS = causal_PxS[None] & key_valid_BxS[:, None, :]
  h, cache = model.apply({"params": params}, prompt_BxP, positions_BxP, mask_BxPxS, cache, 0)
  w = head_weight(cfg, params).astype(dt)
  next_pos_B = jnp.sum(prompt_mask_BxP, axis=-1).astype(jnp.int32)
  stop_ids = jnp.asarray(sp.stop_token_ids or (-1,), jnp.int32)

  def emit(state, logits_BxV, step_rng, i):
    tokens, logps, done, length = state
    tok, lp = _sample(logits_BxV, step_rng, sp)
    tok = jnp.where(done, pad_id, tok)
    lp = jnp.where(done, 0.0, lp)
    tokens = tokens.at[:, i].set(tok)
    logps = logps.at[:, i].set(lp)
    length = length + (~done).astype(jnp.int32)
    done = done | jnp.isin(tok, stop_ids)
    return (tokens, logps, done, length), tok

  out = (jnp.full((b, n), pad_id, jnp.int32), jnp.zeros((b, n), jnp.float32),
         jnp.zeros((b,), bool), jnp.zeros((b,), jnp.int32))
  rngs = jax.random.split(rng, n)
  out, tok = emit(out, h[:, -1] @ w, rngs[0], 0)

  def cond(carry):
    i, _, _, out, _ = carry
    return (i < n) & ~jnp.all(out[2])

  def body(carry):
    i, cache, key_valid, out, tok = carry
    slot = p + i - 1  # the slot of the token sampled at step i-1
    key_valid = key_valid.at[:, slot].set(True)
    pos_Bx1 = (next_pos_B + i - 1)[:, None]
    h, cache = model.apply({"params": params}, tok[:, None], pos_Bx1, key_valid[:, None, :],
                           cache, slot)
    out, tok = emit(out, h[:, -1] @ w, rngs[i], i)
    return i + 1, cache, key_valid, out, tok

  _, _, _, out, _ = jax.lax.while_loop(cond, body, (jnp.int32(1), cache, key_valid_BxS, out, tok))
  tokens, logps, done, length = out
  return tokens, logps, done, length


def generate(cfg: Qwen2Config, params, prompts: list[list[int]], sp: SamplingParams, *,
             seed: int, pad_id: int = 0, batch_multiple: int = 8, prompt_multiple: int = 32):
  """Samples one response per prompt. Returns a dict of numpy arrays:

  tokens [B, N] (pad after the end), logprobs [B, N] (0 after the end), lengths [B],
  finish_reason list of "stop" | "length".
  """
  if not prompts:
    raise ValueError("generate() needs at least one prompt")
  if any(len(x) == 0 for x in prompts):
    raise ValueError("every prompt needs at least one token")
  b = _bucket(len(prompts), batch_multiple)
  p = _bucket(max(len(x) for x in prompts), prompt_multiple)
  toks = np.full((b, p), pad_id, np.int32)
  mask = np.zeros((b, p), np.int32)
  for i, x in enumerate(prompts):
    toks[i, p - len(x):] = x
    mask[i, p - len(x):] = 1
  mask[len(prompts):, -1] = 1  # filler rows: one real token so nothing is fully masked
  tokens, logps, done, length = jax.device_get(_generate(
      params, jnp.asarray(toks), jnp.asarray(mask), jax.random.PRNGKey(seed), cfg=cfg, sp=sp,
      pad_id=pad_id))
  k = len(prompts)
  return {"tokens": tokens[:k], "logprobs": logps[:k], "lengths": length[:k],
          "finish_reason": ["stop" if d else "length" for d in done[:k]]}
