"""The decoder layer, once: `decode_layer` is the math of one Qwen layer (RMSNorm, the q/k/v
projections, Qwen3's per-head q/k RMSNorm, RoPE, attention, the output projection, SwiGLU),
used by the training model (`qwen2.Block`), the prefill, the static sampler and the paged engine.
Only `attend` differs between them: segment attention over a packed row, dense attention over a
prefill cache, a slot cache, or pages.

The weights are typed pytrees from the checkpoint to the kernels: `LayerWeights` as the
checkpoint holds a layer (separate q/k/v kernels [D, N, Dh], in the parameter dtype), and
`DecodeWeights` as the decoders read them (`prepare`: one entry per layer, q/k/v fused into one
[D, (H + 2K)·Dh] projection, everything in the compute dtype).

Legend (presets.py): B batch, T query length, D hidden, H heads, K kv heads, Dh head dim, F MLP
width, V vocab, L layers.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import jax
import jax.numpy as jnp

from prorl_jax.model.presets import ModelConfig
from prorl_jax.parallel import sharding

Array = jax.Array


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


def rms_norm(x, scale, eps: float, dtype):
  """Variance in float32 as HF does; the scale multiplies the already-cast activations."""
  x32 = x.astype(jnp.float32)
  x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
  return scale.astype(dtype) * x32.astype(dtype)


def _matmul(x, kernel, bias, dt):
  """x·W (+ b) over x's last axis as one 2-D matmul [rows, in] x [in, out], the output's
  trailing shape given by the kernel past its first axis."""
  n_in, out_shape = kernel.shape[0], kernel.shape[1:]
  y = x.reshape(-1, n_in).astype(dt) @ kernel.reshape(n_in, -1).astype(dt)
  if bias is not None:
    y = y + bias.reshape(-1).astype(dt)
  return y.reshape(x.shape[:-1] + out_shape)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LayerWeights:
  """One layer as the checkpoint holds it (the training model's parameters): q/k/v kernels
  [D, N, Dh] and biases [N, Dh] (None without: Qwen3), q/k norms [Dh] (None without: Qwen2),
  the output kernel [H, Dh, D], the MLP's [D, F], [D, F], [F, D]."""

  input_norm: Array
  q: Array
  k: Array
  v: Array
  q_bias: Array | None
  k_bias: Array | None
  v_bias: Array | None
  q_norm: Array | None
  k_norm: Array | None
  o: Array
  post_attn_norm: Array
  gate: Array
  up: Array
  down: Array

  def project(self, y_BxTxD, dt, model_cfg: ModelConfig):
    """(q [B, T, H, Dh], k, v [B, T, K, Dh]): three projections."""
    return tuple(
      _matmul(y_BxTxD, w, b, dt)
      for w, b in ((self.q, self.q_bias), (self.k, self.k_bias), (self.v, self.v_bias))
    )


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class FusedLayerWeights:
  """One layer as the decoders read it (`prepare`): q/k/v one projection [D, (H + 2K)·Dh],
  the output [H·Dh, D], all in the compute dtype."""

  input_norm: Array
  qkv: Array
  qkv_bias: Array | None
  q_norm: Array | None
  k_norm: Array | None
  o: Array
  post_attn_norm: Array
  gate: Array
  up: Array
  down: Array

  def project(self, y_BxTxD, dt, model_cfg: ModelConfig):
    """(q [B, T, H, Dh], k, v [B, T, K, Dh]): one projection, split."""
    b, t, _ = y_BxTxD.shape
    h, k, dh = model_cfg.num_heads, model_cfg.num_kv_heads, model_cfg.head_dim
    qkv = y_BxTxD.reshape(b * t, -1) @ self.qkv
    if self.qkv_bias is not None:
      qkv = qkv + self.qkv_bias
    return (
      qkv[:, : h * dh].reshape(b, t, h, dh),
      qkv[:, h * dh : (h + k) * dh].reshape(b, t, k, dh),
      qkv[:, (h + k) * dh :].reshape(b, t, k, dh),
    )


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DecodeWeights:
  """The weights laid out for decoding: one `FusedLayerWeights` per layer (no per-step slice of
  stacked layers), the embedding, the final norm and the [D, V] head, in the compute dtype."""

  layers: tuple[FusedLayerWeights, ...]
  embed: Array
  final_norm: Array
  head: Array


# attend(q [B, T, H, Dh], k, v [B, T, K, Dh]) -> (out [B, T, H, Dh] or [B, T, H·Dh], carry): the
# one part of a layer that differs between the training pass, the prefill and the decoders.
Attend = Callable[[Array, Array, Array], tuple[Array, object]]


def decode_layer(
  model_cfg: ModelConfig,
  w: LayerWeights | FusedLayerWeights,
  x_BxTxD,
  rope: tuple[Array, Array],
  attend: Attend,
  mesh=None,
):
  """One decoder layer over [B, T, D] (T = 1 when decoding): pre-norm attention with RoPE (and
  Qwen3's per-head q/k RMSNorm before it), then the SwiGLU MLP, each added to the residual.
  Returns (x, what `attend` carries out: a cache, pages, or None)."""
  c, dt = model_cfg, jnp.dtype(model_cfg.compute_dtype)
  cos, sin = rope
  q, k, v = w.project(rms_norm(x_BxTxD, w.input_norm, c.rms_norm_eps, dt), dt, c)
  if w.q_norm is not None:
    q = rms_norm(q, w.q_norm, c.rms_norm_eps, dt)
    k = rms_norm(k, w.k_norm, c.rms_norm_eps, dt)
  out, carry = attend(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v)
  b, t, d = x_BxTxD.shape  # the output projection of [B, T, H, Dh] (or [B, T, H·Dh])
  x_BxTxD = x_BxTxD + _matmul(out.reshape(b, t, -1), w.o.reshape(-1, d), None, dt)
  y = rms_norm(x_BxTxD, w.post_attn_norm, c.rms_norm_eps, dt)
  gate, up = _matmul(y, w.gate, None, dt), _matmul(y, w.up, None, dt)
  h_BxTxF = sharding.constrain(jax.nn.silu(gate) * up, ("act_batch", "act_seq", "act_mlp"), mesh)
  return x_BxTxD + _matmul(h_BxTxF, w.down, None, dt), carry


def head_weight(model_cfg: ModelConfig, params) -> Array:
  """The [D, V] output projection (the transposed embedding when tied)."""
  if model_cfg.tie_word_embeddings:
    return params["embed"]["embedding"].T
  return params["lm_head"]


def layer_weights(params_layers, i: int) -> LayerWeights:
  """Layer `i` of the checkpoint's layer parameters (`params["layers"]`, stacked on L) as
  `LayerWeights`."""
  a, m = params_layers["attn"], params_layers["mlp"]

  def opt(node: dict, key: str):  # a bias (Qwen2) or a q/k norm (Qwen3): None where absent
    return node[key][i] if key in node else None

  return LayerWeights(
    input_norm=params_layers["input_norm"]["scale"][i],
    q=a["q_proj"]["kernel"][i],
    k=a["k_proj"]["kernel"][i],
    v=a["v_proj"]["kernel"][i],
    q_bias=opt(a["q_proj"], "bias"),
    k_bias=opt(a["k_proj"], "bias"),
    v_bias=opt(a["v_proj"], "bias"),
    q_norm=opt(a.get("q_norm", {}), "scale"),
    k_norm=opt(a.get("k_norm", {}), "scale"),
    o=a["o_proj"]["kernel"][i],
    post_attn_norm=params_layers["post_attn_norm"]["scale"][i],
    gate=m["gate_proj"]["kernel"][i],
    up=m["up_proj"]["kernel"][i],
    down=m["down_proj"]["kernel"][i],
  )


def _fused(w: LayerWeights, dt) -> FusedLayerWeights:
  d = w.q.shape[0]
  cast = lambda x: None if x is None else x.astype(dt)  # noqa: E731
  bias = None
  if w.q_bias is not None:
    bias = jnp.concatenate([b.reshape(-1) for b in (w.q_bias, w.k_bias, w.v_bias)]).astype(dt)
  return FusedLayerWeights(
    input_norm=w.input_norm.astype(dt),
    qkv=jnp.concatenate([x.reshape(d, -1) for x in (w.q, w.k, w.v)], axis=1).astype(dt),
    qkv_bias=bias,
    q_norm=cast(w.q_norm),
    k_norm=cast(w.k_norm),
    o=w.o.reshape(-1, d).astype(dt),
    post_attn_norm=w.post_attn_norm.astype(dt),
    gate=w.gate.astype(dt),
    up=w.up.astype(dt),
    down=w.down.astype(dt),
  )


@functools.partial(jax.jit, static_argnames=("model_cfg",))
def prepare(model_cfg: ModelConfig, params) -> DecodeWeights:
  """The weights laid out for decoding (`DecodeWeights`); a worker makes them once per weight
  version, an engine itself when not given them."""
  dt = jnp.dtype(model_cfg.compute_dtype)
  return DecodeWeights(
    layers=tuple(
      _fused(layer_weights(params["layers"], i), dt) for i in range(model_cfg.num_layers)
    ),
    embed=params["embed"]["embedding"].astype(dt),
    final_norm=params["final_norm"]["scale"].astype(dt),
    head=head_weight(model_cfg, params).astype(dt),
  )


def decode_stack(model_cfg: ModelConfig, weights: DecodeWeights, tok_B, positions_B, attend_layer):
  """Every layer for one new token per row: `attend_layer(i)` is layer i's `Attend`. Returns
  (the final-normed hidden [B, D], each layer's carry)."""
  dt = jnp.dtype(model_cfg.compute_dtype)
  rope = rope_tables(positions_B[:, None], model_cfg.head_dim, model_cfg.rope_theta)
  x = weights.embed[tok_B][:, None]
  carries = []
  for i, w in enumerate(weights.layers):  # unrolled: per-layer weights and caches, no slicing
    x, carry = decode_layer(model_cfg, w, x, rope, attend_layer(i))
    carries.append(carry)
  return rms_norm(x[:, 0], weights.final_norm, model_cfg.rms_norm_eps, dt), carries
