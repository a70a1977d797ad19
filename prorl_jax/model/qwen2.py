"""Qwen2 decoder in Flax Linen: GQA, RoPE, q/k/v bias, RMSNorm, SwiGLU, scanned layers.

Legend (see presets.py): B batch, T query length, S key length, D hidden, H heads, K kv heads,
G = H/K, Dh head dim, F MLP width, V vocab, L layers.

The module returns final hidden states; logits are a separate step (`head_weight` @ hidden) so
callers can compute log-probs in chunks without a float32 [B, T, V] copy. Every param carries
logical axis names (sharding.LOGICAL_RULES) and activations are constrained by name when a mesh is
given. A KV cache is plain arrays passed in and out (no mutable collections), so the sampler's
decode loop is a pure function too.
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from prorl_jax.model import attention as attn_lib
from prorl_jax.model.presets import Qwen2Config
from prorl_jax.parallel import sharding

# (k_LxBxSxKxDh, v_LxBxSxKxDh) for the whole stack; one layer's slice inside a Block.
KVCache = tuple[jax.Array, jax.Array]


def _dtype(name: str):
  return jnp.dtype(name)


def _init(names, std=0.02):
  return nn.with_logical_partitioning(nn.initializers.normal(std), names)


def rope_tables(positions_BxT, head_dim: int, theta: float):
  """cos/sin of shape [B, T, Dh] in float32, HF's non-interleaved (rotate_half) layout."""
  inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
  freqs_BxTxDh2 = positions_BxT.astype(jnp.float32)[..., None] * inv_freq
  emb_BxTxDh = jnp.concatenate([freqs_BxTxDh2, freqs_BxTxDh2], axis=-1)
  return jnp.cos(emb_BxTxDh), jnp.sin(emb_BxTxDh)


def apply_rope(x_BxTxNxDh, cos_BxTxDh, sin_BxTxDh):
  x = x_BxTxNxDh.astype(jnp.float32)
  half = x.shape[-1] // 2
  rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
  out = x * cos_BxTxDh[:, :, None, :] + rotated * sin_BxTxDh[:, :, None, :]
  return out.astype(x_BxTxNxDh.dtype)


class Linear(nn.Module):
  """y = x·W (+ b) over the last `in_ndim` dims, as one 2-D matmul [B·T, in] x [in, out].

  XLA:CPU runs the backward dots of a 2-D matmul ~1.7x faster than those of the equivalent
  3-D `dot_general` (bench/RESULTS.md), and on accelerators it is the same op.
  """

  out_shape: tuple[int, ...]
  in_ndim: int
  names: tuple[str, ...]  # logical axes of the kernel: in dims then out dims
  use_bias: bool
  param_dtype: Any
  dtype: Any

  @nn.compact
  def __call__(self, x):
    in_shape = x.shape[x.ndim - self.in_ndim :]
    n_in, n_out = math.prod(in_shape), math.prod(self.out_shape)
    kernel = self.param("kernel", _init(self.names), in_shape + self.out_shape, self.param_dtype)
    y = x.reshape(-1, n_in).astype(self.dtype) @ kernel.reshape(n_in, n_out).astype(self.dtype)
    if self.use_bias:
      bias = self.param(
        "bias",
        nn.with_logical_partitioning(nn.initializers.zeros, self.names[self.in_ndim :]),
        self.out_shape,
        self.param_dtype,
      )
      y = y + bias.reshape(n_out).astype(self.dtype)
    return y.reshape(x.shape[: x.ndim - self.in_ndim] + self.out_shape)


def rms_norm(x, scale, eps: float, dtype):
  """Variance in float32 as HF does; the scale multiplies the already-cast activations."""
  x32 = x.astype(jnp.float32)
  x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
  return scale.astype(dtype) * x32.astype(dtype)


class RMSNorm(nn.Module):
  """Root-mean-square layer norm over the last axis with a learned scale (variance in float32)."""

  eps: float
  param_dtype: Any
  dtype: Any

  @nn.compact
  def __call__(self, x):
    scale = self.param(
      "scale",
      nn.with_logical_partitioning(nn.initializers.ones, ("norm",)),
      (x.shape[-1],),
      self.param_dtype,
    )
    return rms_norm(x, scale, self.eps, self.dtype)


class Attention(nn.Module):
  """Grouped-query self-attention with RoPE over [B, T, D]: q/k/v projections (biased, as Qwen2),
  `attention.attend` over segment ids, the output projection."""

  model_cfg: Qwen2Config
  mesh: Any = None

  @nn.compact
  def __call__(self, x_BxTxD, cos, sin, mask_BxTxS, kv=None, cache_index=None, layer=None):
    c = self.model_cfg
    pd, dt = _dtype(c.param_dtype), _dtype(c.compute_dtype)
    h, k, dh = c.num_heads, c.num_kv_heads, c.head_dim

    def proj(name, n, names):
      return Linear((n, dh), 1, ("embed",) + names, True, pd, dt, name=name)

    q_BxTxHxDh = proj("q_proj", h, ("heads", "head_dim"))(x_BxTxD)
    k_BxTxKxDh = proj("k_proj", k, ("kv_heads", "head_dim"))(x_BxTxD)
    v_BxTxKxDh = proj("v_proj", k, ("kv_heads", "head_dim"))(x_BxTxD)
    q_BxTxHxDh = apply_rope(q_BxTxHxDh, cos, sin)
    k_BxTxKxDh = apply_rope(k_BxTxKxDh, cos, sin)
    q_BxTxHxDh = sharding.constrain(
      q_BxTxHxDh, ("act_batch", "act_seq", "act_heads", None), self.mesh
    )

    new_kv = None
    if kv is not None:
      # The cache of all layers [L, B, S, K, Dh] is carried through the layer scan and this
      # layer's new keys/values are written into it in place (no per-step copy of the cache);
      # then this layer attends to all of its slots.
      k_all, v_all = kv
      idx = (layer, 0, cache_index, 0, 0)
      k_all = jax.lax.dynamic_update_slice(k_all, k_BxTxKxDh.astype(k_all.dtype)[None], idx)
      v_all = jax.lax.dynamic_update_slice(v_all, v_BxTxKxDh.astype(v_all.dtype)[None], idx)
      new_kv = (k_all, v_all)
      k_BxSxKxDh = jax.lax.dynamic_index_in_dim(k_all, layer, keepdims=False)
      v_BxSxKxDh = jax.lax.dynamic_index_in_dim(v_all, layer, keepdims=False)
    else:
      k_BxSxKxDh, v_BxSxKxDh = k_BxTxKxDh, v_BxTxKxDh

    if mask_BxTxS.ndim == 2:  # segment ids [B, T] of a full pass (no cache)
      out_BxTxHxDh = attn_lib.segment_attention(
        c.attention_impl,
        q_BxTxHxDh,
        k_BxSxKxDh.astype(dt),
        v_BxSxKxDh.astype(dt),
        mask_BxTxS,
        c.attention_chunk,
        c.attention_window,
        self.mesh,
      )
    else:
      out_BxTxHxDh = attn_lib.dense_attention(
        q_BxTxHxDh, k_BxSxKxDh.astype(dt), v_BxSxKxDh.astype(dt), mask_BxTxS
      )
    out = Linear((c.hidden_size,), 2, ("heads", "head_dim", "embed"), False, pd, dt, name="o_proj")(
      out_BxTxHxDh
    )
    return out, new_kv


class MLP(nn.Module):
  """The SwiGLU feed-forward block: down(silu(gate(x)) * up(x)), [B, T, D] -> [B, T, D]."""

  model_cfg: Qwen2Config
  mesh: Any = None

  @nn.compact
  def __call__(self, x_BxTxD):
    c = self.model_cfg
    pd, dt = _dtype(c.param_dtype), _dtype(c.compute_dtype)

    def dense(name, feat, names):
      return Linear((feat,), 1, names, False, pd, dt, name=name)

    gate = dense("gate_proj", c.intermediate_size, ("embed", "mlp"))(x_BxTxD)
    up = dense("up_proj", c.intermediate_size, ("embed", "mlp"))(x_BxTxD)
    h_BxTxF = sharding.constrain(nn.silu(gate) * up, ("act_batch", "act_seq", "act_mlp"), self.mesh)
    return dense("down_proj", c.hidden_size, ("mlp", "embed"))(h_BxTxF)


class Block(nn.Module):
  """One decoder layer; signature shaped for nn.scan: ((x, cache of all layers), layer index,
  broadcast args...)."""

  model_cfg: Qwen2Config
  mesh: Any = None

  @nn.compact
  def __call__(self, carry, layer, cos, sin, mask_BxTxS, cache_index):
    x_BxTxD, kv = carry
    c = self.model_cfg
    pd, dt = _dtype(c.param_dtype), _dtype(c.compute_dtype)
    norm = lambda name: RMSNorm(c.rms_norm_eps, pd, dt, name=name)  # noqa: E731
    attn_out, new_kv = Attention(c, self.mesh, name="attn")(
      norm("input_norm")(x_BxTxD), cos, sin, mask_BxTxS, kv, cache_index, layer
    )
    x_BxTxD = x_BxTxD + attn_out
    x_BxTxD = x_BxTxD + MLP(c, self.mesh, name="mlp")(norm("post_attn_norm")(x_BxTxD))
    x_BxTxD = sharding.constrain(x_BxTxD, ("act_batch", "act_seq", "act_embed"), self.mesh)
    return (x_BxTxD, new_kv), None


_REMAT_POLICIES = {
  "full": None,  # save nothing inside a layer: least memory
  "dots": jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims,
}


class Qwen2(nn.Module):
  """tokens -> final hidden states [B, T, D] (compute dtype), and the updated KV cache."""

  model_cfg: Qwen2Config
  mesh: Any = None

  @nn.compact
  def __call__(
    self, tokens_BxT, positions_BxT, mask_BxTxS, kv: KVCache | None = None, cache_index=None
  ):
    c = self.model_cfg
    pd, dt = _dtype(c.param_dtype), _dtype(c.compute_dtype)
    embed = nn.Embed(
      c.vocab_size,
      c.hidden_size,
      param_dtype=pd,
      dtype=dt,
      name="embed",
      embedding_init=_init(("vocab", "embed")),
    )
    x_BxTxD = embed(tokens_BxT).astype(dt)
    x_BxTxD = sharding.constrain(x_BxTxD, ("act_batch", "act_seq", "act_embed"), self.mesh)
    cos, sin = rope_tables(positions_BxT, c.head_dim, c.rope_theta)

    block = Block
    if c.remat != "none":
      block = nn.remat(Block, policy=_REMAT_POLICIES[c.remat], prevent_cse=False)
    stack = nn.scan(
      block,
      variable_axes={"params": 0},
      split_rngs={"params": True},
      in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast),
      length=c.num_layers,
      metadata_params={nn.PARTITION_NAME: "layers"},
    )
    (x_BxTxD, new_kv), _ = stack(c, self.mesh, name="layers")(
      (x_BxTxD, kv), jnp.arange(c.num_layers), cos, sin, mask_BxTxS, cache_index
    )
    x_BxTxD = RMSNorm(c.rms_norm_eps, pd, dt, name="final_norm")(x_BxTxD)
    if not c.tie_word_embeddings:
      # Declared here so init creates it; applied by `head_weight` outside the module.
      self.param("lm_head", _init(("embed", "vocab")), (c.hidden_size, c.vocab_size), pd)
    return x_BxTxD, new_kv


def head_weight(model_cfg: Qwen2Config, params) -> jax.Array:
  """The [D, V] output projection (the transposed embedding when tied)."""
  if model_cfg.tie_word_embeddings:
    return params["embed"]["embedding"].T
  return params["lm_head"]
