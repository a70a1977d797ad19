"""The device side of continuous batching (`paged.PagedEngine` schedules on the host): prompts
admitted (prefill, pages written, first tokens) in one call, copy-on-write of pages, and
`steps` decode steps of every slot over the paged KV cache with flash-decoding attention.

Attention over the pages is one of `ATTENTION`: `xla` (blocked flash-decoding in plain XLA,
the CPU's; keys [P, K, Dh, page] and values [P, K, page, Dh]) or `pallas` (JAX's Pallas
paged-attention kernel: the TPU one on TPUs, the Triton one on GPUs; keys and values
[K, P, page, Dh], the kernels' layout); `pallas_interpret` runs the GPU kernel in Pallas'
interpreter on any backend (tests). Legend: S slots, P pages, M pages per slot's table, K kv
heads, G query heads per kv head, Dh head dim, L layers, T tokens.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas.ops.gpu.paged_attention import paged_attention as gpu_paged_attention
from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention as tpu_paged_attention
from jax.sharding import PartitionSpec as P

from prorl_jax.model import prefill
from prorl_jax.model.attention import NEG_SCORE
from prorl_jax.model.layer import decode_stack
from prorl_jax.model.presets import ModelConfig
from prorl_jax.records import SamplingParams
from prorl_jax.rollout.engines.sampler import sample_rows

BLOCK_PAGES = 4  # pages of every slot per attention block (the table's width is a multiple)
# pallas: the backend's kernel; pallas_tpu / pallas_gpu: that kernel whatever the default backend
# (compiling for chips this host does not have)
ATTENTION = ("xla", "pallas", "pallas_tpu", "pallas_gpu", "pallas_interpret")


def pool_shapes(attention: str, pages: int, kv_heads: int, head_dim: int, page: int):
  """(key shape, value shape) of one layer's page pool for an attention kind."""
  if attention == "xla":
    return (pages, kv_heads, head_dim, page), (pages, kv_heads, page, head_dim)
  return ((kv_heads, pages, page, head_dim),) * 2


def choose_attention(requested: str, head_dim: int, page_size: int, backend: str) -> str:
  """The attention kind for a request of `auto` | one of `ATTENTION`: `auto` takes the Pallas
  kernel on a TPU or GPU where its block shapes fit (head_dim a multiple of 128 on a TPU, of 16
  on a GPU; pages of a multiple of 16 tokens), else XLA."""
  if requested != "auto":
    return requested
  if backend == "tpu":
    fits = head_dim % 128 == 0 and page_size % 16 == 0
  elif backend == "gpu":
    fits = head_dim % 16 == 0 and page_size % 16 == 0
  else:
    fits = False
  return "pallas" if fits else "xla"


def _pallas(attention: str) -> bool:
  return attention != "xla"


@functools.partial(jax.jit, static_argnames=("model_cfg", "sp", "attention"), donate_argnums=(2, 3))
def admit(
  params,
  head,
  kpages,
  vpages,
  tokens_BxT,
  lengths_B,
  page_ids_BxN,
  seed_key,
  seq_BxR,
  *,
  model_cfg: ModelConfig,
  sp: SamplingParams,
  attention: str = "xla",
):
  """Admits B prompts in one call: their prefill (right-padded to T = N·page, lengths traced),
  their keys and values written into pages `page_ids_BxN` (0, the trash page, past a prompt's
  own pages), and the first token of each of their R sequences (ids seq_BxR). Returns the pages
  and the first tokens and their log-probs [B, R]."""
  b, t = tokens_BxT.shape
  mask = (jnp.arange(t)[None, :] < lengths_B[:, None]).astype(jnp.int32)
  h, k_all, v_all = prefill(model_cfg, params, tokens_BxT, mask)
  n_pages, ids = page_ids_BxN.shape[1], page_ids_BxN.reshape(-1)
  out_k, out_v = [], []
  kh, dh = model_cfg.num_kv_heads, model_cfg.head_dim
  for layer, (kp, vp) in enumerate(zip(kpages, vpages)):
    if _pallas(attention):  # [K, P, page, Dh]
      page = kp.shape[2]
      k = k_all[layer].reshape(b * n_pages, page, kh, dh).transpose(2, 0, 1, 3)
      v = v_all[layer].reshape(b * n_pages, page, kh, dh).transpose(2, 0, 1, 3)
      out_k.append(kp.at[:, ids].set(k.astype(kp.dtype)))
      out_v.append(vp.at[:, ids].set(v.astype(vp.dtype)))
      continue
    page = kp.shape[-1]
    k = k_all[layer].reshape(b, n_pages, page, kh, dh).transpose(0, 1, 3, 4, 2)
    v = v_all[layer].reshape(b, n_pages, page, kh, dh).transpose(0, 1, 3, 2, 4)
    out_k.append(kp.at[ids].set(k.reshape((-1,) + kp.shape[1:]).astype(kp.dtype)))
    out_v.append(vp.at[ids].set(v.reshape((-1,) + vp.shape[1:]).astype(vp.dtype)))
  r = seq_BxR.shape[1]
  logits_BxV = h[jnp.arange(b), lengths_B - 1] @ head
  logits = jnp.repeat(logits_BxV, r, axis=0)  # [B·R, V], prompt-major as seq_BxR
  tok, lp = sample_rows(logits, seed_key, seq_BxR.reshape(-1), jnp.zeros((b * r,), jnp.int32), sp)
  return tuple(out_k), tuple(out_v), tok.reshape(b, r), lp.reshape(b, r)


@functools.partial(jax.jit, static_argnames=("attention",), donate_argnums=(0, 1))
def copy_pages(kpages, vpages, src_N, dst_N, attention: str = "xla"):
  """Copy-on-write: pages src -> dst in every layer."""
  if _pallas(attention):  # pages are axis 1
    return (
      tuple(kp.at[:, dst_N].set(kp[:, src_N]) for kp in kpages),
      tuple(vp.at[:, dst_N].set(vp[:, src_N]) for vp in vpages),
    )
  return (
    tuple(kp.at[dst_N].set(kp[src_N]) for kp in kpages),
    tuple(vp.at[dst_N].set(vp[src_N]) for vp in vpages),
  )


def pallas_pages(
  q_SxKxGxDh, kp, vp, table_SxM, pos_S, active_S, interpret=False, kernel: str | None = None
):
  """`flash_pages` by JAX's Pallas paged-attention kernel (`kernel` "tpu" or "gpu", default
  the backend's: TPU on a TPU; the GPU kernel in Pallas' interpreter when `interpret`; the TPU
  kernel runs in the TPU interpreter under `pltpu.force_tpu_interpret_mode`), over keys and
  values [K, P, page, Dh]: each slot reads only its own pages up to its length (an idle slot
  one position of the trash page). Returns [S, K, G, Dh] (float32)."""
  s, k, g, dh = q_SxKxGxDh.shape
  q_SxHxDh = q_SxKxGxDh.reshape(s, k * g, dh)  # head h = kv head h // G, as the model's
  lengths = jnp.where(active_S, pos_S + 1, 1).astype(jnp.int32)
  block = min(BLOCK_PAGES, table_SxM.shape[1])
  if kernel is None:
    kernel = "tpu" if jax.default_backend() == "tpu" and not interpret else "gpu"
  if kernel == "tpu":
    attend = functools.partial(tpu_paged_attention, pages_per_compute_block=block)
    mesh = jax.sharding.get_abstract_mesh()
    if not mesh.empty and mesh.size > 1:
      # A Mosaic kernel is not partitioned by XLA: on a mesh (`jax.set_mesh`), every device
      # runs it on the whole (replicated) slots and pages.
      attend = jax.shard_map(attend, mesh=mesh, in_specs=P(), out_specs=P(), check_vma=False)
    out = attend(q_SxHxDh, kp, vp, lengths, table_SxM)
  else:
    out = gpu_paged_attention(
      q_SxHxDh,
      kp,
      vp,
      table_SxM,
      lengths,
      block_h=16,
      pages_per_compute_block=block,
      k_splits=max(1, table_SxM.shape[1] // block),
      interpret=interpret,
    )
  return out.reshape(s, k, g, dh).astype(jnp.float32)


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


def paged_attend(model_cfg, kp, vp, table_SxM, pos_S, active_S, groups, attention="xla"):
  """Attention of one new token per slot over its pages: its key/value written at (its page,
  pos % page), then attention over the slot's pages up to and including pos: with `xla`, in
  `groups` runs of adjacent slots, each as long as its own longest active slot (the host keeps
  slots sorted by length, so a few long sequences do not make every slot read that far); with a
  Pallas kernel, every slot as long as its own. Carries out the updated pages."""
  h, k, dh = model_cfg.num_heads, model_cfg.num_kv_heads, model_cfg.head_dim
  page = kp.shape[2] if _pallas(attention) else kp.shape[-1]

  def attend(q_Sx1xHxDh, k_Sx1xKxDh, v_Sx1xKxDh):
    s, dt = q_Sx1xHxDh.shape[0], q_Sx1xHxDh.dtype
    q_SxKxGxDh = (q_Sx1xHxDh * jnp.asarray(dh**-0.5, dt)).reshape(s, k, h // k, dh)
    new_k, new_v = k_Sx1xKxDh.reshape(s, k, dh), v_Sx1xKxDh.reshape(s, k, dh)
    write_S = jnp.where(
      active_S, jnp.take_along_axis(table_SxM, (pos_S // page)[:, None], 1)[:, 0], 0
    )
    off = pos_S % page
    if _pallas(attention):
      kp2 = kp.at[:, write_S, off, :].set(new_k.transpose(1, 0, 2).astype(kp.dtype))
      vp2 = vp.at[:, write_S, off, :].set(new_v.transpose(1, 0, 2).astype(vp.dtype))
      interpret = attention == "pallas_interpret"
      kernel = {"pallas_tpu": "tpu", "pallas_gpu": "gpu"}.get(attention)
      out = pallas_pages(q_SxKxGxDh, kp2, vp2, table_SxM, pos_S, active_S, interpret, kernel)
      return out.reshape(s, 1, h * dh), (kp2, vp2)
    kp2 = kp.at[write_S, :, :, off].set(new_k.astype(kp.dtype))
    vp2 = vp.at[write_S, :, off, :].set(new_v.astype(vp.dtype))
    bounds = np.linspace(0, s, groups + 1).astype(int)
    out = jnp.concatenate(
      [
        flash_pages(q_SxKxGxDh[a:b], kp2, vp2, table_SxM[a:b], pos_S[a:b], active_S[a:b])
        for a, b in zip(bounds[:-1], bounds[1:])
        if b > a
      ]
    )
    return out.reshape(s, 1, h * dh), (kp2, vp2)

  return attend


@functools.partial(
  jax.jit,
  static_argnames=("model_cfg", "sp", "steps", "groups", "attention"),
  donate_argnums=(1, 2),
)
def decode(
  weights,
  kpages,
  vpages,
  table_SxM,
  state,
  seed_key,
  *,
  model_cfg,
  sp,
  steps,
  groups=1,
  attention="xla",
):
  """`steps` decode steps of every active slot. `state`: the slots' `SlotState` (pos, tok, ngen,
  cap, active, seq; each [S]). `groups`: runs of adjacent slots whose attention stops at
  their own longest (`paged_attend`); `attention`: one of `ATTENTION`.
  Returns the pages, the new state and, per step, the tokens, log-probs and which slots
  emitted [steps, S]."""
  stop_ids = jnp.asarray(sp.stop_token_ids or (-1,), jnp.int32)
  n_max = sp.max_new_tokens

  def step(carry, _):
    kps, vps, st = carry
    pos, tok, ngen, active, seq = st.pos, st.tok, st.ngen, st.active, st.seq
    x, pages = decode_stack(
      model_cfg,
      weights,
      tok,
      pos,
      lambda i: paged_attend(model_cfg, kps[i], vps[i], table_SxM, pos, active, groups, attention),
    )
    new_k, new_v = zip(*pages)
    nxt, lp = sample_rows(x @ weights.head, seed_key, seq, ngen, sp)
    emitted = active
    ngen = ngen + active.astype(jnp.int32)
    active = active & ~jnp.isin(nxt, stop_ids) & (ngen < jnp.minimum(st.cap, n_max))
    st = st._replace(pos=pos + emitted.astype(jnp.int32), tok=jnp.where(emitted, nxt, tok))
    st = st._replace(ngen=ngen, active=active)
    return (tuple(new_k), tuple(new_v), st), (nxt, lp, emitted)

  (kpages, vpages, state), (toks, lps, emitted) = jax.lax.scan(
    step, (kpages, vpages, state), None, length=steps
  )
  return kpages, vpages, state, toks, lps, emitted
