"""The Qwen2 and Qwen3 decoder in Flax Linen (`Decoder`, `ModelConfig`), Hugging Face weight I/O.

Public API: `load_hf`, `save_hf`, `forward`, `log_probs`, plus `hidden_states`, `init_params`,
`param_logical_axes`, `param_shardings`, `load_tokenizer` and the presets.

The package itself imports no JAX: rollout workers run in vLLM's environment, which has none, and
use only `model.tokenizer` and `model.presets`. The model's functions (`model.core`) load on first
use, so `from prorl_jax.model import forward` works as a plain import does.
"""

from __future__ import annotations

import importlib

_HOME = {
  "positions_from_mask": "prorl_jax.model.core",
  "causal_mask": "prorl_jax.model.core",
  "hidden_states": "prorl_jax.model.core",
  "prefill": "prorl_jax.model.core",
  "forward": "prorl_jax.model.core",
  "log_probs": "prorl_jax.model.core",
  "param_logical_axes": "prorl_jax.model.core",
  "param_shardings": "prorl_jax.model.core",
  "init_params": "prorl_jax.model.core",
  "load_hf": "prorl_jax.model.core",
  "save_hf": "prorl_jax.model.core",
  "Decoder": "prorl_jax.model.decoder",
  "head_weight": "prorl_jax.model.decoder",
  "ModelConfig": "prorl_jax.model.presets",
  "load_tokenizer": "prorl_jax.model.tokenizer",
}
__all__ = sorted(_HOME)


def __getattr__(name: str):
  if name not in _HOME:
    raise AttributeError(f"module 'prorl_jax.model' has no attribute {name!r}")
  value = getattr(importlib.import_module(_HOME[name]), name)
  globals()[name] = value  # found once: later lookups are plain module attributes
  return value
