"""The Qwen2 / Qwen3 decoder in Flax Linen: the parameters, named and laid out as the checkpoint
holds them, scanned over the layers; each layer's math is `layer.decode_layer` (GQA, RoPE,
Qwen2's q/k/v bias or Qwen3's per-head q/k RMSNorm, SwiGLU), the one the decoders run.

Legend (see presets.py): B batch, T query length, S key length, D hidden, H heads, K kv heads,
G = H/K, Dh head dim, F MLP width, V vocab, L layers.

The module returns final hidden states; logits are a separate step (`head_weight` @ hidden) so
callers can compute log-probs in chunks without a float32 [B, T, V] copy. Every param carries
logical axis names (sharding.LOGICAL_RULES) and activations are constrained by name when a mesh is
given. A KV cache is plain arrays passed in and out (no mutable collections), so the sampler's
decode loop is a pure function too.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from prorl_jax.model import attention as attn_lib
from prorl_jax.model.layer import LayerWeights, decode_layer, head_weight, rms_norm, rope_tables
from prorl_jax.model.presets import ModelConfig
from prorl_jax.parallel import sharding

# (k_LxBxSxKxDh, v_LxBxSxKxDh) for the whole stack; one layer's slice inside a Block.
KVCache = tuple[jax.Array, jax.Array]


def _dtype(name: str):
  return jnp.dtype(name)


def _init(names, std=0.02):
  return nn.with_logical_partitioning(nn.initializers.normal(std), names)


class Kernel(nn.Module):
  """Declares a projection's parameters (`kernel` in `shape`, with logical axes `names`; a zero
  `bias` over the output dims when `bias_dims`) and returns them; `layer.decode_layer` applies
  them. With a LoRA `rank`, also `lora_a` [*in, r] (peft's initialisation: uniform in
  ±1/sqrt(fan_in)) and `lora_b` [r, *out] (zeros, so the adapted model starts as the base), the
  first `in_dims` dims of `shape` being the input's; the kernel returned is then
  `kernel + scale · A @ B`, merged here, inside the layer's scan, in float32."""

  shape: tuple[int, ...]
  names: tuple[str, ...]
  bias_dims: int
  param_dtype: Any
  rank: int = 0
  scale: float = 0.0
  in_dims: int = 1

  @nn.compact
  def __call__(self):
    kernel = self.param("kernel", _init(self.names), self.shape, self.param_dtype)
    if self.rank:  # merged in float32; the layer casts it to the compute dtype
      kernel = kernel.astype(jnp.float32) + self._delta()
    if not self.bias_dims:
      return kernel, None
    zeros = nn.with_logical_partitioning(nn.initializers.zeros, self.names[-self.bias_dims :])
    return kernel, self.param("bias", zeros, self.shape[-self.bias_dims :], self.param_dtype)

  def _delta(self):
    ins, outs = self.shape[: self.in_dims], self.shape[self.in_dims :]
    a_init = nn.with_logical_partitioning(lora_a_init, self.names[: self.in_dims] + ("lora",))
    b_init = nn.with_logical_partitioning(
      nn.initializers.zeros, ("lora",) + self.names[self.in_dims :]
    )
    a = self.param("lora_a", a_init, ins + (self.rank,), jnp.float32)
    b = self.param("lora_b", b_init, (self.rank,) + outs, jnp.float32)
    return self.scale * jnp.tensordot(a, b, axes=([a.ndim - 1], [0]))


def lora_a_init(key, shape, dtype=jnp.float32):
  """A LoRA A [*in, r] as peft initialises it (Kaiming-uniform with a = sqrt(5)): uniform in
  ±1/sqrt(fan_in), fan_in the product of the input dims."""
  fan_in = 1
  for d in shape[:-1]:
    fan_in *= d
  return jax.random.uniform(key, shape, dtype, -(fan_in**-0.5), fan_in**-0.5)


def _lora(model_cfg: ModelConfig, target: str) -> tuple[int, float]:
  """(rank, scale) of the adapter on projection `target`: (0, 0.0) without one."""
  on = model_cfg.lora_on(target)
  return (model_cfg.lora_rank, model_cfg.lora_scale) if on else (0, 0.0)


class Scale(nn.Module):
  """Declares an RMSNorm's learned scale (ones) of `size` and returns it."""

  size: int
  param_dtype: Any

  @nn.compact
  def __call__(self):
    ones = nn.with_logical_partitioning(nn.initializers.ones, ("norm",))
    return self.param("scale", ones, (self.size,), self.param_dtype)


class AttentionWeights(nn.Module):
  """The attention's parameters, named as the checkpoint names them: q/k/v kernels [D, N, Dh]
  (biased for Qwen2), Qwen3's per-head q/k norms [Dh], the output kernel [H, Dh, D]."""

  model_cfg: ModelConfig

  @nn.compact
  def __call__(self):
    c = self.model_cfg
    pd, dh, bias = _dtype(c.param_dtype), c.head_dim, 2 if c.qkv_bias else 0

    def proj(name, n, names):
      shape, names = (c.hidden_size, n, dh), ("embed",) + names
      return Kernel(shape, names, bias, pd, *_lora(c, name), name=name)()

    q = proj("q_proj", c.num_heads, ("heads", "head_dim"))
    k = proj("k_proj", c.num_kv_heads, ("kv_heads", "head_dim"))
    v = proj("v_proj", c.num_kv_heads, ("kv_heads", "head_dim"))
    o_shape, o_names = (c.num_heads, dh, c.hidden_size), ("heads", "head_dim", "embed")
    o, _ = Kernel(o_shape, o_names, 0, pd, *_lora(c, "o_proj"), 2, name="o_proj")()
    norms = (None, None)
    if c.qk_norm:
      norms = (Scale(dh, pd, name="q_norm")(), Scale(dh, pd, name="k_norm")())
    return q, k, v, o, norms


class MLPWeights(nn.Module):
  """The SwiGLU MLP's kernels: gate and up [D, F], down [F, D]."""

  model_cfg: ModelConfig

  @nn.compact
  def __call__(self):
    c = self.model_cfg
    pd, d, f = _dtype(c.param_dtype), c.hidden_size, c.intermediate_size
    gate, _ = Kernel((d, f), ("embed", "mlp"), 0, pd, *_lora(c, "gate_proj"), name="gate_proj")()
    up, _ = Kernel((d, f), ("embed", "mlp"), 0, pd, *_lora(c, "up_proj"), name="up_proj")()
    down, _ = Kernel((f, d), ("mlp", "embed"), 0, pd, *_lora(c, "down_proj"), name="down_proj")()
    return gate, up, down


def _train_attend(model_cfg: ModelConfig, mesh, mask_BxTxS, kv, cache_index, layer):
  """The training pass's and the prefill's attention: segment attention over a full pass (`mask`
  is segment ids [B, T]), or, with a prefill cache `kv` of all layers [L, B, S, K, Dh], this
  layer's keys and values written into it in place and dense attention over its slots."""
  c, dt = model_cfg, _dtype(model_cfg.compute_dtype)

  def attend(q_BxTxHxDh, k_BxTxKxDh, v_BxTxKxDh):
    q_BxTxHxDh = sharding.constrain(q_BxTxHxDh, ("act_batch", "act_seq", "act_heads", None), mesh)
    new_kv = None
    if kv is not None:
      k_all, v_all = kv
      idx = (layer, 0, cache_index, 0, 0)
      k_all = jax.lax.dynamic_update_slice(k_all, k_BxTxKxDh.astype(k_all.dtype)[None], idx)
      v_all = jax.lax.dynamic_update_slice(v_all, v_BxTxKxDh.astype(v_all.dtype)[None], idx)
      new_kv = (k_all, v_all)
      k_BxTxKxDh = jax.lax.dynamic_index_in_dim(k_all, layer, keepdims=False)
      v_BxTxKxDh = jax.lax.dynamic_index_in_dim(v_all, layer, keepdims=False)
    k, v = k_BxTxKxDh.astype(dt), v_BxTxKxDh.astype(dt)
    if mask_BxTxS.ndim == 2:  # segment ids [B, T] of a full pass (no cache)
      out = attn_lib.segment_attention(
        c.attention_impl, q_BxTxHxDh, k, v, mask_BxTxS, c.attention_chunk, c.attention_window, mesh
      )
    else:
      out = attn_lib.dense_attention(q_BxTxHxDh, k, v, mask_BxTxS)
    return out, new_kv

  return attend


class Block(nn.Module):
  """One decoder layer (`layer.decode_layer` over this layer's parameters); signature shaped for
  nn.scan: ((x, cache of all layers), layer index, broadcast args...)."""

  model_cfg: ModelConfig
  mesh: Any = None

  @nn.compact
  def __call__(self, carry, layer, cos, sin, mask_BxTxS, cache_index):
    x_BxTxD, kv = carry
    c = self.model_cfg
    pd = _dtype(c.param_dtype)
    input_norm = Scale(c.hidden_size, pd, name="input_norm")()
    (q, q_b), (k, k_b), (v, v_b), o, (q_norm, k_norm) = AttentionWeights(c, name="attn")()
    post_attn_norm = Scale(c.hidden_size, pd, name="post_attn_norm")()
    gate, up, down = MLPWeights(c, name="mlp")()
    w = LayerWeights(
      input_norm, q, k, v, q_b, k_b, v_b, q_norm, k_norm, o, post_attn_norm, gate, up, down
    )
    attend = _train_attend(c, self.mesh, mask_BxTxS, kv, cache_index, layer)
    x_BxTxD, new_kv = decode_layer(c, w, x_BxTxD, (cos, sin), attend, self.mesh)
    x_BxTxD = sharding.constrain(x_BxTxD, ("act_batch", "act_seq", "act_embed"), self.mesh)
    return (x_BxTxD, new_kv), None


_REMAT_POLICIES = {
  "full": None,  # save nothing inside a layer: least memory
  "dots": jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims,
}


class Decoder(nn.Module):
  """tokens -> final hidden states [B, T, D] (compute dtype), and the updated KV cache."""

  model_cfg: ModelConfig
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
    final_norm = Scale(c.hidden_size, pd, name="final_norm")()
    x_BxTxD = rms_norm(x_BxTxD, final_norm, c.rms_norm_eps, dt)
    if not c.tie_word_embeddings:
      # Declared here so init creates it; applied by `head_weight` outside the module.
      self.param("lm_head", _init(("embed", "vocab")), (c.hidden_size, c.vocab_size), pd)
    return x_BxTxD, new_kv


def abstract_variables(model_cfg: ModelConfig):
  """The decoder's variables as shapes (`jax.eval_shape`: nothing allocated), each parameter
  boxed with its logical axes."""
  tokens = jnp.zeros((1, 1), jnp.int32)
  mask = jnp.ones((1, 1, 1), bool)
  return jax.eval_shape(
    lambda: Decoder(model_cfg).init(jax.random.PRNGKey(0), tokens, tokens, mask)
  )


__all__ = ["Decoder", "Block", "head_weight", "KVCache", "abstract_variables"]
