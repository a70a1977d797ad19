"""The model's functions: forward passes, parameter init and shardings, Hugging Face weight I/O
(re-exported by `prorl_jax.model`)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from prorl_jax.model import hf_weights
from prorl_jax.model.decoder import Decoder, abstract_variables, head_weight
from prorl_jax.model.presets import ModelConfig
from prorl_jax.parallel import sharding


def positions_from_mask(mask_BxT):
  """RoPE positions for a left-padded batch: 0 at each row's first real token."""
  return jnp.maximum(jnp.cumsum(mask_BxT.astype(jnp.int32), axis=-1) - 1, 0)


def causal_mask(mask_BxT):
  """[B, T, T] bool: query t sees key s <= t when s is a real token."""
  t = mask_BxT.shape[-1]
  tril = jnp.tril(jnp.ones((t, t), dtype=bool))
  return tril[None] & mask_BxT.astype(bool)[:, None, :]


def hidden_states(
  model_cfg: ModelConfig,
  params,
  tokens_BxT,
  attention_mask_BxT=None,
  mesh=None,
  *,
  segment_ids_BxT=None,
  positions_BxT=None,
):
  """Final hidden states [B, T, D] in the compute dtype.

  A padded batch gives `attention_mask_BxT` (1 on real tokens; positions count from each row's
  first real token). A packed batch gives `segment_ids_BxT` (1, 2, ... per sequence of a row, 0
  on padding) and `positions_BxT` (restarting at 0 in each sequence): each token attends only to
  the earlier tokens of its own sequence.
  """
  if segment_ids_BxT is None:
    if attention_mask_BxT is None:
      attention_mask_BxT = jnp.ones(tokens_BxT.shape, jnp.int32)
    segment_ids_BxT = attention_mask_BxT.astype(jnp.int32)
    positions_BxT = positions_from_mask(attention_mask_BxT)
  elif positions_BxT is None:
    raise ValueError("a packed batch (segment_ids_BxT) needs positions_BxT")
  h, _ = Decoder(model_cfg, mesh).apply(
    {"params": params}, tokens_BxT, positions_BxT, segment_ids_BxT.astype(jnp.int32)
  )
  return h


def prefill(model_cfg: ModelConfig, params, tokens_BxT, mask_BxT):
  """A prompt's pass that keeps its keys and values: (hidden states [B, T, D], keys and values
  [layers, B, T, K, Dh]) of the prompts `tokens_BxT` whose real tokens `mask_BxT` marks (left
  or right padding alike), in the compute dtype. The engines lay the cache out their own way."""
  b, t = tokens_BxT.shape
  dt = jnp.dtype(model_cfg.compute_dtype)
  cache = (
    jnp.zeros((model_cfg.num_layers, b, t, model_cfg.num_kv_heads, model_cfg.head_dim), dt),
  ) * 2
  h, (k_all, v_all) = Decoder(model_cfg).apply(
    {"params": params}, tokens_BxT, positions_from_mask(mask_BxT), causal_mask(mask_BxT), cache, 0
  )
  return h, k_all, v_all


def forward(model_cfg: ModelConfig, params, tokens_BxT, attention_mask_BxT=None, mesh=None):
  """Logits, float32 [B, T, V]. For training use `losses.token_logprobs` on hidden states."""
  h = hidden_states(model_cfg, params, tokens_BxT, attention_mask_BxT, mesh)
  w = head_weight(model_cfg, params).astype(h.dtype)
  return jnp.einsum("btd,dv->btv", h, w).astype(jnp.float32)


def log_probs(model_cfg: ModelConfig, params, tokens_BxT):
  """log-softmax of the logits, float32 [B, T, V]: the log-probs a rollout engine is checked
  against (the probe), on short sequences where the full vocabulary fits."""
  return jax.nn.log_softmax(forward(model_cfg, params, tokens_BxT), -1)


def param_logical_axes(model_cfg: ModelConfig):
  """The params pytree with a PartitionSpec of logical names at each leaf."""
  return nn.get_partition_spec(abstract_variables(model_cfg))["params"]


def param_shardings(model_cfg: ModelConfig, mesh):
  """NamedShardings for the params on `mesh` (dims a mesh axis does not divide stay whole)."""
  abstract = nn.meta.unbox(abstract_variables(model_cfg))["params"]

  def one(path, spec, a):
    name = "param " + "/".join(str(getattr(k, "key", k)) for k in path)
    return jax.sharding.NamedSharding(
      mesh, sharding.fit_spec(sharding.logical_to_spec(tuple(spec)), a.shape, mesh, name)
    )

  return jax.tree_util.tree_map_with_path(
    one,
    param_logical_axes(model_cfg),
    abstract,
    is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec),
  )


def init_params(model_cfg: ModelConfig, rng, mesh=None):
  """Random params (std 0.02), created directly in their shardings when a mesh is given."""
  tokens = jnp.zeros((1, 1), jnp.int32)
  mask = jnp.ones((1, 1, 1), bool)
  init = lambda r: nn.meta.unbox(Decoder(model_cfg).init(r, tokens, tokens, mask))["params"]  # noqa: E731
  if mesh is None:
    return jax.jit(init)(rng)
  return jax.jit(init, out_shardings=param_shardings(model_cfg, mesh))(rng)


def load_hf(
  path: str,
  dtype: str = "float32",
  mesh=None,
  compute_dtype: str | None = None,
  remat: str = "none",
  attention_impl: str = "xla",
  attention_chunk: int = 1024,
  lora_rank: int = 0,
  lora_alpha: float = 16.0,
  lora_targets: tuple[str, ...] = (),
  lora_seed: int = 0,
):
  """(model_cfg, params) from a HF directory; placed in `mesh`'s shardings when one is given.
  With `lora_rank`, fresh adapters (`lora.init_adapters`, seeded by `lora_seed`) join the base:
  the adapted model starts as the base."""
  model_cfg = ModelConfig.from_hf_dict(
    hf_weights.read_hf_config(path),
    param_dtype=dtype,
    compute_dtype=compute_dtype or dtype,
    remat=remat,
    attention_impl=attention_impl,
    attention_chunk=attention_chunk,
    lora_rank=lora_rank,
    lora_alpha=lora_alpha,
    lora_targets=tuple(lora_targets),
  )
  host = hf_weights.hf_to_params(model_cfg, hf_weights.read_tensors(path), jnp.dtype(dtype))
  if lora_rank:
    from prorl_jax.model import lora  # the adapters' module imports the decoder's init

    fresh = lora.init_adapters(model_cfg, jax.random.PRNGKey(lora_seed))
    host = lora.with_adapters(host, jax.tree.map(np.asarray, fresh))
  if mesh is None:
    return model_cfg, jax.tree.map(jnp.asarray, host)
  shardings = param_shardings(model_cfg, mesh)
  return model_cfg, jax.tree.map(lambda x, s: jax.device_put(x, s), host, shardings)


def save_hf(
  model_cfg: ModelConfig,
  params,
  path: str,
  tokenizer_dir: str | None = None,
  dtype: str | None = None,
  max_shard_bytes: int = 0,
) -> list[str]:
  """Writes HF-named safetensors + config.json (+ tokenizer files) that transformers loads."""
  tensors = hf_weights.params_to_hf(
    model_cfg, jax.device_get(params), None if dtype is None else np.dtype(jnp.dtype(dtype))
  )
  return hf_weights.write_hf_dir(model_cfg, tensors, path, tokenizer_dir, max_shard_bytes)
