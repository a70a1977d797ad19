"""Random tiny Hugging Face Qwen2 and Qwen3 models built in the test (the independent
reference)."""

from __future__ import annotations

import numpy as np


def make_hf_qwen2(
  path: str,
  *,
  tie: bool = False,
  heads: int = 4,
  kv_heads: int = 2,
  hidden: int = 64,
  layers: int = 2,
  vocab: int = 97,
  inter: int = 128,
  rope_theta: float = 10000.0,
  seed: int = 0,
  save: bool = True,
  family: str = "qwen2",
  head_dim: int | None = None,
):
  """Builds a Qwen2ForCausalLM (or a Qwen3ForCausalLM: `family="qwen3"`, its `head_dim` free of
  hidden / heads) with O(1)-scale random weights, saves it, returns the model."""
  import torch
  import transformers

  torch.manual_seed(seed)
  qwen3 = family == "qwen3"
  extra = {"head_dim": head_dim or hidden // heads, "attention_bias": False} if qwen3 else {}
  config_class = transformers.Qwen3Config if qwen3 else transformers.Qwen2Config
  model_cfg = config_class(
    **extra,
    vocab_size=vocab,
    hidden_size=hidden,
    intermediate_size=inter,
    num_hidden_layers=layers,
    num_attention_heads=heads,
    num_key_value_heads=kv_heads,
    rope_theta=rope_theta,
    rms_norm_eps=1e-6,
    tie_word_embeddings=tie,
    max_position_embeddings=256,
    attn_implementation="eager",
    bos_token_id=1,
    eos_token_id=2,
  )
  model_class = transformers.Qwen3ForCausalLM if qwen3 else transformers.Qwen2ForCausalLM
  model = model_class(model_cfg).eval()
  gen = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "norm" in name:
        p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
      else:  # large enough that attention and logits are far from uniform
        p.copy_(torch.randn(p.shape, generator=gen) / np.sqrt(max(p.shape[-1], 1)) * 1.5)
  if save:
    model.save_pretrained(path, safe_serialization=True)
  return model


def hf_logits(model, tokens: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
  import torch

  ids = torch.tensor(tokens, dtype=torch.long)
  if mask is None:
    mask = np.ones_like(tokens)
  pos = np.maximum(np.cumsum(mask, -1) - 1, 0)
  with torch.no_grad():
    out = model(
      input_ids=ids,
      attention_mask=torch.tensor(mask, dtype=torch.long),
      position_ids=torch.tensor(pos, dtype=torch.long),
    )
  return out.logits.float().numpy()
