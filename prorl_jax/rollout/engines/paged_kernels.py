"""The device side of continuous batching (`paged.PagedEngine` schedules on the host): a
prompt's prefill and its pages written, copy-on-write of a page, a group's first tokens, and
`steps` decode steps of every slot over the paged KV cache with flash-decoding attention.
Legend: S slots, P pages, M pages per slot's table, K kv heads, G query heads per kv head, Dh
head dim, L layers, T tokens.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from prorl_jax.model import Qwen2, causal_mask, positions_from_mask
from prorl_jax.model.attention import NEG_SCORE
from prorl_jax.model.presets import Qwen2Config
from prorl_jax.model.qwen2 import apply_rope, rms_norm, rope_tables
from prorl_jax.records import SamplingParams
from prorl_jax.rollout.engines.jax_sampler import sample_rows

BLOCK_PAGES = 4  # pages of every slot per attention block (the table's width is a multiple)


@functools.partial(jax.jit, static_argnames=("cfg",))
def prefill(params, tokens_1xT, length, *, cfg: Qwen2Config):
  """One prompt (right-padded to T; `length` is traced: one compile per page-rounded T): its
  keys [L, K, Dh, T], values [L, K, T, Dh] per layer stacked, and the final hidden state [D] of
  its last real token."""
  t = tokens_1xT.shape[1]
  mask = (jnp.arange(t) < length).astype(jnp.int32)[None]
  dt = jnp.dtype(cfg.compute_dtype)
  cache = (jnp.zeros((cfg.num_layers, 1, t, cfg.num_kv_heads, cfg.head_dim), dt),) * 2
  h, (k_all, v_all) = Qwen2(cfg).apply(
    {"params": params}, tokens_1xT, positions_from_mask(mask), causal_mask(mask), cache, 0
  )
  return k_all[:, 0].transpose(0, 2, 3, 1), v_all[:, 0].transpose(0, 2, 1, 3), h[0, length - 1]


@functools.partial(jax.jit, donate_argnums=(0, 1))
def write_prompt(kpages, vpages, k_LxKxDhxT, v_LxKxTxDh, page_ids_N):
  """The prompt's keys/values into pages `page_ids_N` (T = N·page)."""
  n = page_ids_N.shape[0]
  out_k, out_v = [], []
  for layer, (kp, vp) in enumerate(zip(kpages, vpages)):
    page = kp.shape[-1]
    k = k_LxKxDhxT[layer].reshape(kp.shape[1], kp.shape[2], n, page).transpose(2, 0, 1, 3)
    v = v_LxKxTxDh[layer].reshape(vp.shape[1], n, page, vp.shape[3]).transpose(1, 0, 2, 3)
    out_k.append(kp.at[page_ids_N].set(k.astype(kp.dtype)))
    out_v.append(vp.at[page_ids_N].set(v.astype(vp.dtype)))
  return tuple(out_k), tuple(out_v)


@functools.partial(jax.jit, donate_argnums=(0, 1))
def copy_pages(kpages, vpages, src_N, dst_N):
  """Copy-on-write: pages src -> dst in every layer."""
  return (
    tuple(kp.at[dst_N].set(kp[src_N]) for kp in kpages),
    tuple(vp.at[dst_N].set(vp[src_N]) for vp in vpages),
  )


@functools.partial(jax.jit, static_argnames=("sp",))
def first_tokens(head, h_D, seed_key, seq_ids_N, *, sp: SamplingParams):
  """Each of a group's sequences draws its first token after the prompt (final hidden h_D)."""
  n = seq_ids_N.shape[0]
  logits_V = h_D @ head
  logits_NxV = jnp.broadcast_to(logits_V, (n, logits_V.shape[0]))
  return sample_rows(logits_NxV, seed_key, seq_ids_N, jnp.zeros((n,), jnp.int32), sp)


def flash_pages(q_SxKxGxDh, kp, vp, table_SxM, pos_S, active_S):
  """Attention of one query per slot over its pages up to and including pos: `BLOCK_PAGES`
  pages of every slot at a time (a gather of blocks that stay in cache), folded into a running
  softmax (flash-decoding), for as many blocks as the longest active slot uses; a slot past its
  own length reads the trash page, masked. Scores and values are multiplies and sums rather
  than batched [G, Dh] x [Dh, page] matmuls, which XLA:CPU runs as many tiny calls.
  Returns [S, K, G, Dh] (float32)."""
  s, k, g, dh = q_SxKxGxDh.shape
  page, dt = kp.shape[-1], q_SxKxGxDh.dtype
  block = min(BLOCK_PAGES, table_SxM.shape[1])  # the table's width is a multiple of it
  span = block * page

  def block_step(j, acc):
    m_run, l_run, o_run = acc  # [S, K, G], [S, K, G], [S, K, G, Dh]
    ids = jax.lax.dynamic_slice_in_dim(table_SxM, j * block, block, axis=1)  # [S, block]
    k_SxKxDhxT = kp[ids].astype(dt).transpose(0, 2, 3, 1, 4).reshape(s, k, dh, span)
    v_SxKxTxDh = vp[ids].astype(dt).transpose(0, 2, 1, 3, 4).reshape(s, k, span, dh)
    sc = jnp.sum(q_SxKxGxDh[..., None] * k_SxKxDhxT[:, :, None], axis=3).astype(jnp.float32)
    valid = j * span + jnp.arange(span)[None, :] <= pos_S[:, None]  # [S, span]
    sc = jnp.where(valid[:, None, None, :], sc, NEG_SCORE)
    m_new = jnp.maximum(m_run, sc.max(-1))
    scale = jnp.exp(m_run - m_new)
    p = jnp.exp(sc - m_new[..., None])
    l_new = l_run * scale + p.sum(-1)
    pv = jnp.sum(p.astype(dt)[..., None] * v_SxKxTxDh[:, :, None], axis=3)
    return m_new, l_new, o_run * scale[..., None] + pv

  acc = (
    jnp.full((s, k, g), NEG_SCORE, jnp.float32),
    jnp.zeros((s, k, g), jnp.float32),
    jnp.zeros((s, k, g, dh), jnp.float32),
  )
  blocks = (jnp.max(jnp.where(active_S, pos_S, -1)) + span) // span  # 0 when none is active
  _, l_run, o_run = jax.lax.fori_loop(0, blocks, block_step, acc)
  return o_run / jnp.maximum(l_run, 1e-30)[..., None]


def attend_paged(cfg, w, x_SxD, cos, sin, kp, vp, table_SxM, pos_S, active_S, groups):
  """One layer for one new token per slot: its key/value written at (its page, pos % page),
  then attention over the slot's pages up to and including pos, in `groups` runs of adjacent
  slots, each as long as its own longest active slot (the host keeps slots sorted by length,
  so a few long sequences do not make every slot read that far)."""
  s = x_SxD.shape[0]
  h, k, dh, dt = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, x_SxD.dtype
  g, page = h // k, kp.shape[-1]
  qkv = rms_norm(x_SxD, w["input_norm"], cfg.rms_norm_eps, dt) @ w["qkv"] + w["qkv_bias"]
  q = apply_rope(qkv[:, : h * dh].reshape(s, 1, h, dh), cos, sin)
  q_SxKxGxDh = (q * jnp.asarray(dh**-0.5, dt)).reshape(s, k, g, dh)
  new_k = apply_rope(qkv[:, h * dh : (h + k) * dh].reshape(s, 1, k, dh), cos, sin).reshape(s, k, dh)
  new_v = qkv[:, (h + k) * dh :].reshape(s, k, dh)
  write_S = jnp.where(
    active_S, jnp.take_along_axis(table_SxM, (pos_S // page)[:, None], 1)[:, 0], 0
  )
  off = pos_S % page
  kp = kp.at[write_S, :, :, off].set(new_k.astype(kp.dtype))
  vp = vp.at[write_S, :, off, :].set(new_v.astype(vp.dtype))
  bounds = np.linspace(0, s, groups + 1).astype(int)
  out = jnp.concatenate(
    [
      flash_pages(q_SxKxGxDh[a:b], kp, vp, table_SxM[a:b], pos_S[a:b], active_S[a:b])
      for a, b in zip(bounds[:-1], bounds[1:])
      if b > a
    ]
  )
  x_SxD = x_SxD + out.astype(dt).reshape(s, h * dh) @ w["o"]
  y = rms_norm(x_SxD, w["post_attn_norm"], cfg.rms_norm_eps, dt)
  x_SxD = x_SxD + (jax.nn.silu(y @ w["gate"]) * (y @ w["up"])) @ w["down"]
  return x_SxD, kp, vp


@functools.partial(jax.jit, static_argnames=("cfg", "sp", "steps", "groups"), donate_argnums=(1, 2))
def decode(weights, kpages, vpages, table_SxM, state, seed_key, *, cfg, sp, steps, groups=1):
  """`steps` decode steps of every active slot. `state`: pos [S] (the next cache position), tok
  [S] (the last token), ngen [S] (tokens drawn so far), cap [S] (the sequence's token limit),
  active [S], seq [S] (sequence ids). `groups`: runs of adjacent slots whose attention stops at
  their own longest (`attend_paged`).
  Returns the pages, the new state and, per step, the tokens, log-probs and which slots
  emitted [steps, S]."""
  dt = jnp.dtype(cfg.compute_dtype)
  stop_ids = jnp.asarray(sp.stop_token_ids or (-1,), jnp.int32)
  n_max = sp.max_new_tokens

  def step(carry, _):
    kps, vps, st = carry
    pos, tok, ngen, active, seq = st["pos"], st["tok"], st["ngen"], st["active"], st["seq"]
    cos, sin = rope_tables(pos[:, None], cfg.head_dim, cfg.rope_theta)
    x = weights["embed"][tok]
    new_k, new_v = [], []
    for layer in range(cfg.num_layers):
      x, kp, vp = attend_paged(
        cfg,
        weights["layers"][layer],
        x,
        cos,
        sin,
        kps[layer],
        vps[layer],
        table_SxM,
        pos,
        active,
        groups,
      )
      new_k.append(kp)
      new_v.append(vp)
    x = rms_norm(x, weights["final_norm"], cfg.rms_norm_eps, dt)
    nxt, lp = sample_rows(x @ weights["head"], seed_key, seq, ngen, sp)
    emitted = active
    ngen = ngen + active.astype(jnp.int32)
    active = active & ~jnp.isin(nxt, stop_ids) & (ngen < jnp.minimum(st["cap"], n_max))
    st = dict(st, pos=pos + emitted.astype(jnp.int32), tok=jnp.where(emitted, nxt, tok))
    st = dict(st, ngen=ngen, active=active)
    return (tuple(new_k), tuple(new_v), st), (nxt, lp, emitted)

  (kpages, vpages, state), (toks, lps, emitted) = jax.lax.scan(
    step, (kpages, vpages, state), None, length=steps
  )
  return kpages, vpages, state, toks, lps, emitted
