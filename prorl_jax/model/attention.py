"""Attention over segment ids: one causal sequence per segment, several segments per row.

A full pass (training, log-probs, prefill without a cache) describes its rows by segment ids
[B, T]: query t sees key s when s <= t and both carry the same id. A padded batch is the case of
one segment per row (id 1 on real tokens, 0 on padding); a packed batch holds several whole
sequences per row. Three implementations, chosen by `model.attention_impl`:

  xla     query blocks of `chunk` rows, each block's scores [B, K, G, chunk, S] rematerialised in
          the backward pass, so the float32 scores of a long row never exist at once (any backend);
          with `window` (the longest segment) a block sees only the S = chunk + window keys that
          can hold its segments, not the whole row: a packed row of short sequences costs about
          T * (chunk + window) scores instead of T * T
  cudnn   cuDNN fused attention with the block-diagonal causal mask (NVIDIA GPUs, 16-bit compute)
  splash  Pallas splash attention with segment ids (TPU; Pallas interpret mode elsewhere)
  pallas_gpu  Pallas' GPU flash attention (a Triton kernel) with segment ids: one fused kernel a
          pass, no [T, T] mask or score buffer (NVIDIA GPUs; the packed passes there; rows of a
          multiple of 128 tokens; Pallas interpret mode elsewhere)

Padding queries (id 0) see the earlier padding of their row; nothing of theirs reaches a real
token or the loss. Legend: B rows, T tokens, H query heads, K kv heads, G = H/K, Dh head dim.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from prorl_jax.parallel import sharding

NEG_SCORE = -1e30  # masked score: finite so a fully masked (padding) query row stays finite


def segment_mask(seg_q_BxC, seg_k_BxS, q_start=0, k_start=0):
  """[B, C, S] bool: query q_start + i sees key k_start + j <= q_start + i of the same segment."""
  c, s = seg_q_BxC.shape[-1], seg_k_BxS.shape[-1]
  causal = (q_start + jnp.arange(c))[:, None] >= (k_start + jnp.arange(s))[None, :]
  return causal[None] & (seg_q_BxC[:, :, None] == seg_k_BxS[:, None, :])


def dense_attention(q_BxTxHxDh, k_BxSxKxDh, v_BxSxKxDh, mask_BxTxS):
  """Grouped-query softmax attention; `mask_BxTxS` true where query t may see key s.

  Heads-major layout: each kv head's G query heads are stacked along the query axis, so both
  products are plain batched matmuls over (B, K) (2x faster fwd+bwd on XLA:CPU than the
  [B, K, G, T, S] einsum).
  """
  b, t, h, dh = q_BxTxHxDh.shape
  s, k = k_BxSxKxDh.shape[1], k_BxSxKxDh.shape[2]
  g = h // k
  q_BxKxGTxDh = (
    (q_BxTxHxDh * jnp.asarray(dh**-0.5, q_BxTxHxDh.dtype))
    .reshape(b, t, k, g, dh)
    .transpose(0, 2, 3, 1, 4)
    .reshape(b, k, g * t, dh)
  )
  k_BxKxSxDh = k_BxSxKxDh.transpose(0, 2, 1, 3)
  v_BxKxSxDh = v_BxSxKxDh.transpose(0, 2, 1, 3)
  scores = jnp.einsum("bkqd,bksd->bkqs", q_BxKxGTxDh, k_BxKxSxDh)
  # Softmax in float32: bf16 scores lose the small differences that decide attention weights.
  scores = scores.astype(jnp.float32).reshape(b, k, g, t, s)
  scores = jnp.where(mask_BxTxS[:, None, None, :, :], scores, NEG_SCORE)
  probs = jax.nn.softmax(scores, axis=-1).astype(q_BxTxHxDh.dtype).reshape(b, k, g * t, s)
  out = jnp.einsum("bkqs,bksd->bkqd", probs, v_BxKxSxDh)
  return out.reshape(b, k, g, t, dh).transpose(0, 3, 1, 2, 4).reshape(b, t, h, dh)


def xla_segment_attention(
  q_BxTxHxDh, k_BxTxKxDh, v_BxTxKxDh, seg_BxT, chunk: int = 1024, window: int = 0
):
  """Segment attention in query blocks of `chunk` rows (one block when T <= chunk or chunk=0).

  `window` > 0 promises that no segment is longer than `window` tokens (segments are contiguous
  runs of a row): query t then needs only keys in (t - window, t], so each block attends to the
  `chunk + window` keys (rounded up to a multiple of `chunk`) that end with it. The dropped keys
  were masked: the result is the same."""
  t = q_BxTxHxDh.shape[1]
  if not chunk or t <= chunk:
    return dense_attention(q_BxTxHxDh, k_BxTxKxDh, v_BxTxKxDh, segment_mask(seg_BxT, seg_BxT))
  pad = (-t) % chunk
  n = (t + pad) // chunk
  q = jnp.pad(q_BxTxHxDh, ((0, 0), (0, pad), (0, 0), (0, 0)))
  seg_q = jnp.pad(seg_BxT, ((0, 0), (0, pad)), constant_values=-1)
  span = -(-(chunk + window - 1) // chunk) * chunk if window > 0 else t
  span = min(span, t)

  @jax.checkpoint
  def block(i):
    start = i * chunk
    q_BxCxHxDh = jax.lax.dynamic_slice_in_dim(q, start, chunk, axis=1)
    sq_BxC = jax.lax.dynamic_slice_in_dim(seg_q, start, chunk, axis=1)
    k_start = jnp.clip(start + chunk - span, 0, t - span)  # keys [k_start, k_start + span)
    k_BxSxKxDh = jax.lax.dynamic_slice_in_dim(k_BxTxKxDh, k_start, span, axis=1)
    v_BxSxKxDh = jax.lax.dynamic_slice_in_dim(v_BxTxKxDh, k_start, span, axis=1)
    sk_BxS = jax.lax.dynamic_slice_in_dim(seg_BxT, k_start, span, axis=1)
    mask = segment_mask(sq_BxC, sk_BxS, start, k_start) | (sq_BxC == -1)[:, :, None]
    return dense_attention(q_BxCxHxDh, k_BxSxKxDh, v_BxSxKxDh, mask)

  out_NxBxCxHxDh = jax.lax.map(block, jnp.arange(n))
  b, _, h, dh = q_BxTxHxDh.shape
  return out_NxBxCxHxDh.swapaxes(0, 1).reshape(b, n * chunk, h, dh)[:, :t]


def cudnn_segment_attention(q_BxTxHxDh, k_BxTxKxDh, v_BxTxKxDh, seg_BxT):
  """cuDNN flash attention with the block-diagonal causal mask; same result as the XLA path."""
  mask = segment_mask(seg_BxT, seg_BxT)
  return jax.nn.dot_product_attention(
    q_BxTxHxDh, k_BxTxKxDh, v_BxTxKxDh, mask=mask[:, None], is_causal=True, implementation="cudnn"
  )


@functools.lru_cache(maxsize=16)
def _splash_kernel(t: int, g: int, interpret: bool, block: int):
  # lazy: the TPU kernels load only when splash attention is asked for
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

  mask = sm.MultiHeadMask([sm.CausalMask((t, t)) for _ in range(g)])
  bs = min(block, t)
  sizes = sk.BlockSizes(
    block_q=bs,
    block_kv=bs,
    block_kv_compute=bs,
    block_q_dkv=bs,
    block_kv_dkv=bs,
    block_kv_dkv_compute=bs,
    block_q_dq=bs,
    block_kv_dq=bs,
  )
  return sk.make_splash_mqa_single_device(mask, block_sizes=sizes, interpret=interpret)


def splash_segment_attention(
  q_BxTxHxDh, k_BxTxKxDh, v_BxTxKxDh, seg_BxT, *, interpret: bool | None = None, block: int = 512
):
  """Pallas splash attention (TPU) with segment ids: per row and kv head, an MQA kernel over
  that head's G query heads. Interpret mode (any backend, slow) when not on a TPU."""
  # lazy: as in _splash_kernel
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk

  if interpret is None:  # the mesh's TPUs pass False (`per_device`); else the default backend
    interpret = jax.default_backend() != "tpu"
  b, t, h, dh = q_BxTxHxDh.shape
  k = k_BxTxKxDh.shape[2]
  g = h // k
  if t % min(block, t) or (t > block and t % 128):
    raise ValueError(f"splash attention needs the row length ({t}) to be a multiple of {block}")
  kernel = _splash_kernel(t, g, interpret, block)
  scale = jnp.asarray(dh**-0.5, q_BxTxHxDh.dtype)
  q_BxKxGxTxDh = (q_BxTxHxDh * scale).reshape(b, t, k, g, dh).transpose(0, 2, 3, 1, 4)
  k_BxKxTxDh = k_BxTxKxDh.transpose(0, 2, 1, 3)
  v_BxKxTxDh = v_BxTxKxDh.transpose(0, 2, 1, 3)

  def row(q_KxGxTxDh, k_KxTxDh, v_KxTxDh, seg_T):
    ids = sk.SegmentIds(q=seg_T, kv=seg_T)
    return jax.vmap(lambda q, kk, vv: kernel(q, kk, vv, segment_ids=ids))(
      q_KxGxTxDh, k_KxTxDh, v_KxTxDh
    )

  out_BxKxGxTxDh = jax.vmap(row)(q_BxKxGxTxDh, k_BxKxTxDh, v_BxKxTxDh, seg_BxT.astype(jnp.int32))
  return out_BxKxGxTxDh.transpose(0, 3, 1, 2, 4).reshape(b, t, h, dh)


def pallas_gpu_segment_attention(
  q_BxTxHxDh, k_BxTxKxDh, v_BxTxKxDh, seg_BxT, *, interpret: bool | None = None
):
  """Pallas' GPU flash attention over segment ids, causal: each kv head repeated over its G
  query heads (the kernel takes as many kv heads as query heads). T a multiple of 128."""
  # why: the Triton kernel's module loads only where this attention runs
  from jax.experimental.pallas.ops.gpu import attention as gpu_attention

  if interpret is None:  # the mesh's GPUs pass False (`per_device`); else the default backend
    interpret = jax.default_backend() != "gpu"
  g = q_BxTxHxDh.shape[2] // k_BxTxKxDh.shape[2]
  k, v = jnp.repeat(k_BxTxKxDh, g, axis=2), jnp.repeat(v_BxTxKxDh, g, axis=2)
  scale = q_BxTxHxDh.shape[-1] ** -0.5
  return gpu_attention.mha(
    q_BxTxHxDh, k, v, seg_BxT, sm_scale=scale, causal=True, interpret=interpret
  )


def per_device(fn, q_BxTxHxDh, k_BxTxKxDh, v_BxTxKxDh, seg_BxT, mesh):
  """A kernel's attention on a mesh: XLA partitions no Mosaic or Triton kernel, so each device
  runs `fn` on its own rows (split over data x fsdp) and heads (split over tensor where both the
  query and the kv heads divide, so each shard keeps whole GQA groups)."""
  rows = sharding.fit_spec(sharding.logical_to_spec(("act_batch",)), seg_BxT.shape[:1], mesh)[0]
  heads = sharding.logical_to_spec(("act_heads",))[0]
  h, k = q_BxTxHxDh.shape[2], k_BxTxKxDh.shape[2]
  size = sharding.axes_size(heads, mesh)
  heads = heads if h % size == 0 and k % size == 0 else None
  qkv = jax.sharding.PartitionSpec(rows, None, heads, None)
  seg = jax.sharding.PartitionSpec(rows, None)
  return jax.shard_map(
    fn, mesh=mesh, in_specs=(qkv, qkv, qkv, seg), out_specs=qkv, check_vma=False
  )(q_BxTxHxDh, k_BxTxKxDh, v_BxTxKxDh, seg_BxT)


# the Pallas kernels: impl -> (attention, the platforms whose chips run it compiled)
_KERNELS = {
  "splash": (splash_segment_attention, ("tpu",)),
  "pallas_gpu": (pallas_gpu_segment_attention, ("gpu", "cuda")),
}


def segment_attention(impl: str, q, k, v, seg_BxT, chunk: int = 1024, window: int = 0, mesh=None):
  """The full pass's attention by `impl`; a Pallas kernel on a mesh of its chips runs per device
  (`per_device`: splash on TPUs, pallas_gpu on NVIDIA GPUs), in Pallas' interpreter elsewhere."""
  if impl == "cudnn":
    return cudnn_segment_attention(q, k, v, seg_BxT)
  if impl in _KERNELS:
    fn, platforms = _KERNELS[impl]
    if mesh is not None and mesh.devices.flat[0].platform in platforms:
      return per_device(functools.partial(fn, interpret=False), q, k, v, seg_BxT, mesh)
    return fn(q, k, v, seg_BxT)
  return xla_segment_attention(q, k, v, seg_BxT, chunk, window)
