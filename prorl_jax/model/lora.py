"""LoRA adapters on the decoder's projections (`ModelConfig.lora_rank`, `lora_alpha`,
`lora_targets`): where they sit, how they are made, merged, told apart from the frozen base and
written as peft writes them.

An adapted projection's parameters are the base `kernel` and `lora_a` [L, *in, r], `lora_b`
[L, r, *out] (stacked over the L layers, as the kernel is); the decoder's layer uses
`kernel + alpha / r · A @ B` (`decoder.Kernel`), so the one decode layer serves both. In peft's
terms (`lora_A.weight` [r, in], `lora_B.weight` [out, r], y = x Wᵀ + scaling · x Aᵀ Bᵀ) our A is
peft's A transposed and our B peft's B transposed, the in and out dims unflattened as our kernel
lays them out (`hf_weights`).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from prorl_jax.model.decoder import abstract_variables, lora_a_init
from prorl_jax.model.presets import LORA_TARGETS, ModelConfig

ADAPTER_KEYS = ("lora_a", "lora_b")
# target -> (its module under a layer, as params and the checkpoint name it; peft's module path)
_WHERE = {
  "q_proj": (("attn", "q_proj"), "self_attn.q_proj"),
  "k_proj": (("attn", "k_proj"), "self_attn.k_proj"),
  "v_proj": (("attn", "v_proj"), "self_attn.v_proj"),
  "o_proj": (("attn", "o_proj"), "self_attn.o_proj"),
  "gate_proj": (("mlp", "gate_proj"), "mlp.gate_proj"),
  "up_proj": (("mlp", "up_proj"), "mlp.up_proj"),
  "down_proj": (("mlp", "down_proj"), "mlp.down_proj"),
}
assert tuple(_WHERE) == LORA_TARGETS


@functools.cache
def _io_shapes(model_cfg: ModelConfig) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
  """target -> (input dims, output dims) of its kernel per layer, read off the adapters the
  decoder declares (`decoder.Kernel`; `jax.eval_shape`: nothing allocated)."""
  shapes = nn.meta.unbox(abstract_variables(model_cfg))["params"]["layers"]
  out = {}
  for target in LORA_TARGETS:
    if model_cfg.lora_on(target):
      (mod, name), _ = _WHERE[target]
      a, b = shapes[mod][name]["lora_a"].shape, shapes[mod][name]["lora_b"].shape
      out[target] = (a[1:-1], b[2:])  # A [L, *in, r], B [L, r, *out]
  return out


def is_adapter(path) -> bool:
  """Is the leaf at this tree path (`jax.tree_util` keys) an adapter's A or B?"""
  return bool(path) and getattr(path[-1], "key", None) in ADAPTER_KEYS


def trainable_mask(params):
  """The params tree as booleans: True on the adapters (what the optimizer updates), False on
  the frozen base."""
  return jax.tree_util.tree_map_with_path(lambda p, _: is_adapter(p), params)


def _labels(params):
  return jax.tree.map(lambda t: "adapter" if t else "base", trainable_mask(params))


def adapters_only(tx) -> optax.GradientTransformation:
  """`tx` on the adapters, nothing on the frozen base: its updates are zero and it holds no
  optimizer state (no Adam moments for the base). Not `optax.masked`, which passes a masked
  leaf's gradient through as its update."""
  return optax.multi_transform({"adapter": tx, "base": optax.set_to_zero()}, _labels)


def reference(params):
  """What the reference policy keeps of `params` (at the start and at each reset): with
  adapters, only them (the base is frozen and shared: no second copy of it), else all."""
  return adapters(params) or params


def reference_params(params, ref):
  """The reference policy's whole params: the base with the reference's adapters (`ref` as
  `reference` kept it), or `ref` itself without adapters. Arrays are shared, not copied."""
  return with_adapters(params, ref) if adapters(params) else ref


def adapters(params) -> dict:
  """The adapters of a params tree, as a tree of their own ({layers: {attn: {q_proj: {lora_a,
  lora_b}}}})."""
  out: dict = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    if is_adapter(path):
      node = out
      for k in path[:-1]:
        node = node.setdefault(k.key, {})
      node[path[-1].key] = leaf
  return out


def with_adapters(params, adapter_tree) -> dict:
  """A copy of `params` with `adapter_tree`'s leaves put in (the base's leaves shared)."""

  def put(node, new):
    out = dict(node)
    for k, v in new.items():
      out[k] = put(node.get(k, {}), v) if isinstance(v, dict) else v
    return out

  return put(params, adapter_tree)


def init_adapters(model_cfg: ModelConfig, rng) -> dict:
  """Fresh adapters for every target of `model_cfg`: A as peft initialises it, B zero (the
  adapted model starts as its base)."""
  out: dict = {}
  for i, target in enumerate(t for t in LORA_TARGETS if model_cfg.lora_on(t)):
    ins, outs = _io_shapes(model_cfg)[target]
    a = jax.vmap(lambda k, ins=ins: lora_a_init(k, ins + (model_cfg.lora_rank,)))(
      jax.random.split(jax.random.fold_in(rng, i), model_cfg.num_layers)
    )
    (mod, name), _ = _WHERE[target]
    b = jnp.zeros((model_cfg.num_layers, model_cfg.lora_rank) + outs, jnp.float32)
    out.setdefault("layers", {}).setdefault(mod, {})[name] = {"lora_a": a, "lora_b": b}
  return out


def merged(model_cfg: ModelConfig, params) -> tuple[ModelConfig, dict]:
  """(the config without adapters, params with each adapted kernel replaced by kernel + scale ·
  A @ B and the adapters dropped): what the engines, vLLM and an export load. Without adapters
  both as given."""
  if not model_cfg.lora_rank:
    return model_cfg, params
  layers = params["layers"]
  new_layers = {mod: dict(node) for mod, node in layers.items()}
  for target in LORA_TARGETS:
    if not model_cfg.lora_on(target):
      continue
    (mod, name), _ = _WHERE[target]
    node = dict(layers[mod][name])
    a, b = node.pop("lora_a"), node.pop("lora_b")
    delta = jax.vmap(lambda x, y: jnp.tensordot(x, y, axes=([x.ndim - 1], [0])))(a, b)
    kernel = node["kernel"]
    node["kernel"] = (kernel.astype(jnp.float32) + model_cfg.lora_scale * delta).astype(
      kernel.dtype
    )
    new_layers[mod][name] = node
  base = model_cfg.replace(lora_rank=0, lora_targets=())
  return base, {**params, "layers": new_layers}


def without_adapters(model_cfg: ModelConfig, params) -> tuple[ModelConfig, dict]:
  """(the config without adapters, the params without them): the frozen base a LoRA run
  publishes once. Without adapters both as given."""
  if not model_cfg.lora_rank:
    return model_cfg, params

  def strip(node):
    if not isinstance(node, dict):
      return node
    return {k: strip(v) for k, v in node.items() if k not in ADAPTER_KEYS}

  return model_cfg.replace(lora_rank=0, lora_targets=()), strip(params)


def to_peft(model_cfg: ModelConfig, params) -> dict[str, np.ndarray]:
  """The adapters as peft saves them (adapter_model.safetensors): per layer and target
  `base_model.model.model.layers.{i}.{module}.lora_A.weight` [r, in] and `lora_B.weight`
  [out, r], float32."""
  out = {}
  for target in LORA_TARGETS:
    if not model_cfg.lora_on(target):
      continue
    (mod, name), module = _WHERE[target]
    node = params["layers"][mod][name]
    a, b = np.asarray(node["lora_a"], np.float32), np.asarray(node["lora_b"], np.float32)
    for i in range(model_cfg.num_layers):
      key = f"base_model.model.model.layers.{i}.{module}"
      out[f"{key}.lora_A.weight"] = a[i].reshape(-1, model_cfg.lora_rank).T.copy()
      out[f"{key}.lora_B.weight"] = b[i].reshape(model_cfg.lora_rank, -1).T.copy()
  return out


def from_peft(model_cfg: ModelConfig, tensors: dict) -> dict:
  """Adapters from peft's tensors (`to_peft`'s names; a live model's `.lora_A.default.weight`
  too), in our layout."""
  tensors = {k.replace(".default.weight", ".weight"): v for k, v in tensors.items()}
  out: dict = {}
  for target in LORA_TARGETS:
    if not model_cfg.lora_on(target):
      continue
    (mod, name), module = _WHERE[target]
    ins, outs = _io_shapes(model_cfg)[target]
    a, b = [], []
    for i in range(model_cfg.num_layers):
      key = f"base_model.model.model.layers.{i}.{module}"
      a.append(np.asarray(tensors[f"{key}.lora_A.weight"], np.float32).T.reshape(ins + (-1,)))
      b.append(np.asarray(tensors[f"{key}.lora_B.weight"], np.float32).T.reshape((-1,) + outs))
    layer = {"lora_a": jnp.asarray(np.stack(a)), "lora_b": jnp.asarray(np.stack(b))}
    out.setdefault("layers", {}).setdefault(mod, {})[name] = layer
  return out
