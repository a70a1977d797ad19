"""Batched generation with a KV cache: jitted prefill, then a jitted decode loop.

Prompts are left-padded into a shape bucket (batch and prompt length rounded up), so the whole
generate function compiles once per bucket and sampling settings, not per call. Returns response
tokens, the log-prob of each sampled token under the sampling distribution (logits/temperature,
after top-k/top-p filtering), and a finish reason per row (`stop` / `length`).

Legend: B batch, Tp padded prompt length, Tn max new tokens, S = Tp + Tn cache slots, V vocab.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from prorl_jax.model import prefill
from prorl_jax.model.attention import NEG_SCORE
from prorl_jax.model.layer import decode_stack, prepare
from prorl_jax.model.presets import ModelConfig
from prorl_jax.records import Generation, SamplingParams
from prorl_jax.rollout.engines.sampler import sample_rows


def _bucket(x: int, multiple: int) -> int:
  return max(multiple, -(-x // multiple) * multiple)


def _slot_attend(model_cfg: ModelConfig, k_BxKxDhxS, v_BxKxSxDh, slot, valid_BxS):
  """Attention of one new token per row over a dense slot cache: its key and value written in
  place at `slot`, keys cached transposed so the scores are a plain [G, Dh] x [Dh, S] matmul per
  (row, kv head). Carries out the updated caches."""
  h, k, dh = model_cfg.num_heads, model_cfg.num_kv_heads, model_cfg.head_dim

  def attend(q_Bx1xHxDh, k_Bx1xKxDh, v_Bx1xKxDh):
    b, dt = q_Bx1xHxDh.shape[0], q_Bx1xHxDh.dtype
    q_BxKxGxDh = (q_Bx1xHxDh * jnp.asarray(dh**-0.5, dt)).reshape(b, k, h // k, dh)
    kc = jax.lax.dynamic_update_slice(
      k_BxKxDhxS, k_Bx1xKxDh.reshape(b, k, dh, 1).astype(k_BxKxDhxS.dtype), (0, 0, 0, slot)
    )
    vc = jax.lax.dynamic_update_slice(
      v_BxKxSxDh, v_Bx1xKxDh.reshape(b, k, 1, dh).astype(v_BxKxSxDh.dtype), (0, 0, slot, 0)
    )
    scores = jnp.einsum("bkgd,bkds->bkgs", q_BxKxGxDh, kc.astype(dt)).astype(jnp.float32)
    scores = jnp.where(valid_BxS[:, None, None, :], scores, NEG_SCORE)
    probs = jax.nn.softmax(scores, axis=-1).astype(dt)
    return jnp.einsum("bkgs,bksd->bkgd", probs, vc.astype(dt)).reshape(b, 1, h * dh), (kc, vc)

  return attend


def _prefill(model_cfg: ModelConfig, params, prompt_BxTp, prompt_mask_BxTp, n: int):
  """The model itself over a cache of the prompt's P slots; returns its last hidden states and
  one cache per layer for decoding, keys [B, K, Dh, P + n] and values [B, K, P + n, Dh]."""
  h, k_all, v_all = prefill(model_cfg, params, prompt_BxTp, prompt_mask_BxTp)
  ks = tuple(
    jnp.pad(k_all[i].transpose(0, 2, 3, 1), ((0, 0), (0, 0), (0, 0), (0, n)))
    for i in range(model_cfg.num_layers)
  )
  vs = tuple(
    jnp.pad(v_all[i].transpose(0, 2, 1, 3), ((0, 0), (0, 0), (0, n), (0, 0)))
    for i in range(model_cfg.num_layers)
  )
  return h, ks, vs


def _emitter(rng, limit_B, sp: SamplingParams, pad_id: int):
  """(emit, the empty output): `emit(out, logits, i)` draws every row's token i (pad and 0
  after a row's end) into out = (tokens, logps, done, length, stopped)."""
  b, n = limit_B.shape[0], sp.max_new_tokens
  stop_ids = jnp.asarray(sp.stop_token_ids or (-1,), jnp.int32)
  rows_B = jnp.arange(b, dtype=jnp.int32)

  def emit(state, logits_BxV, i):
    tokens, logps, done, length, stopped = state
    tok, lp = sample_rows(logits_BxV, rng, rows_B, jnp.full((b,), i, jnp.int32), sp)
    tok = jnp.where(done, pad_id, tok)
    lp = jnp.where(done, 0.0, lp)
    tokens = tokens.at[:, i].set(tok)
    logps = logps.at[:, i].set(lp)
    length = length + (~done).astype(jnp.int32)
    stopped = stopped | (~done & jnp.isin(tok, stop_ids))
    done = done | jnp.isin(tok, stop_ids) | (length >= limit_B)
    return (tokens, logps, done, length, stopped), tok

  empty = (
    jnp.full((b, n), pad_id, jnp.int32),
    jnp.zeros((b, n), jnp.float32),
    jnp.zeros((b,), bool),
    jnp.zeros((b,), jnp.int32),
    jnp.zeros((b,), bool),
  )
  return emit, empty


@functools.partial(jax.jit, static_argnames=("model_cfg", "sp", "pad_id"))
def _generate(
  params,
  weights,
  prompt_BxTp,
  prompt_mask_BxTp,
  rng,
  limit_B,
  *,
  model_cfg: ModelConfig,
  sp: SamplingParams,
  pad_id: int,
):
  p, n = prompt_BxTp.shape[1], sp.max_new_tokens
  h, ks, vs = _prefill(model_cfg, params, prompt_BxTp, prompt_mask_BxTp, n)
  key_valid_BxS = jnp.pad(prompt_mask_BxTp.astype(bool), ((0, 0), (0, n)))
  next_pos_B = jnp.sum(prompt_mask_BxTp, axis=-1).astype(jnp.int32)
  emit, out = _emitter(rng, limit_B, sp, pad_id)
  out, tok = emit(out, h[:, -1] @ weights.head, 0)

  def cond(carry):
    i, _, _, _, out, _ = carry
    return (i < n) & ~jnp.all(out[2])

  def body(carry):
    i, ks, vs, key_valid, out, tok = carry
    slot = p + i - 1  # the slot of the token sampled at step i-1
    key_valid = key_valid.at[:, slot].set(True)
    x_BxD, caches = decode_stack(
      model_cfg,
      weights,
      tok,
      next_pos_B + i - 1,
      lambda layer: _slot_attend(model_cfg, ks[layer], vs[layer], slot, key_valid),
    )
    new_ks, new_vs = zip(*caches)
    out, tok = emit(out, x_BxD @ weights.head, i)
    return i + 1, tuple(new_ks), tuple(new_vs), key_valid, out, tok

  _, _, _, _, out, _ = jax.lax.while_loop(
    cond, body, (jnp.int32(1), ks, vs, key_valid_BxS, out, tok)
  )
  tokens, logps, _, length, stopped = out
  return tokens, logps, stopped, length


def generate(
  model_cfg: ModelConfig,
  params,
  prompts: list[list[int]],
  sp: SamplingParams,
  *,
  seed: int,
  pad_id: int = 0,
  batch_multiple: int = 8,
  prompt_multiple: int = 32,
  weights=None,
  max_new=None,
) -> Generation:
  """Samples one response per prompt, a `records.Generation` of B rows: tokens [B, N] (pad after
  the end), logprobs [B, N] (0 after the end), lengths [B], stopped [B]. `weights`:
  `prepare(model_cfg, params)`, made here if None. `max_new`: each row's own token limit (at most
  sp.max_new_tokens; default that)."""
  if not prompts:
    raise ValueError("generate() needs at least one prompt")
  if any(len(x) == 0 for x in prompts):
    raise ValueError("every prompt needs at least one token")
  b = _bucket(len(prompts), batch_multiple)
  p = _bucket(max(len(x) for x in prompts), prompt_multiple)
  toks = np.full((b, p), pad_id, np.int32)
  mask = np.zeros((b, p), np.int32)
  for i, x in enumerate(prompts):
    toks[i, p - len(x) :] = x
    mask[i, p - len(x) :] = 1
  mask[len(prompts) :, -1] = 1  # filler rows: one real token so nothing is fully masked
  limit = np.full(b, sp.max_new_tokens, np.int32)
  if max_new is not None:
    limit[: len(prompts)] = np.minimum(max_new, sp.max_new_tokens)
  if weights is None:
    weights = prepare(model_cfg, params)
  tokens, logps, done, length = jax.device_get(
    _generate(
      params,
      weights,
      jnp.asarray(toks),
      jnp.asarray(mask),
      jax.random.PRNGKey(seed),
      jnp.asarray(limit),
      model_cfg=model_cfg,
      sp=sp,
      pad_id=pad_id,
    )
  )
  k = len(prompts)
  return Generation.of(tokens[:k], logps[:k], length[:k], done[:k])
