"""`ModelConfig`: the architecture (from a HF `config.json`) plus how to run it (dtypes, remat).

Dimension legend used across `model/`: B batch, T query length, S key length (cache slots),
D hidden, H query heads, K kv heads, G = H/K query heads per kv head, Dh head dim, F MLP width,
V vocabulary, L layers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# The projections a LoRA adapter may sit on, as the checkpoint (and peft's target_modules) names
# them (the config's default `lora.targets` is all of them: tests/lora_test.py holds the two).
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_problem(rank: int, targets) -> str | None:
  """What is wrong with a LoRA setting (a rank, the projections it adapts), or None: the one
  check behind `ModelConfig` and the run's plan."""
  if rank < 0 or (rank and not targets):
    return f"lora_rank={rank} needs a rank >= 0 and lora_targets when > 0"
  if bad := sorted(set(targets) - set(LORA_TARGETS)):
    return f"lora.targets {', '.join(bad)} are not among {', '.join(LORA_TARGETS)}"
  return None


# the full passes' attention (`model/attention.py`)
FULL_PASS_ATTENTION = ("xla", "cudnn", "splash", "pallas_gpu")

SUPPORTED_ARCHITECTURES = ("Qwen2ForCausalLM", "Qwen3ForCausalLM")
# model_type -> architecture: the families the one decoder layer runs. Qwen2 biases its q/k/v
# projections; Qwen3 has no bias and RMS-normalises each head's queries and keys before RoPE.
FAMILIES = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}


# The fields of a config.json the model cannot be built without
REQUIRED_FIELDS = (
  "vocab_size",
  "hidden_size",
  "intermediate_size",
  "num_hidden_layers",
  "num_attention_heads",
)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """The Qwen2 / Qwen3 architecture (`family`; sizes, grouped-query attention heads, RoPE;
  `from_hf_dict` reads a Hugging Face config) and how to run it (dtypes, rematerialisation)."""

  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  rope_theta: float = 10000.0
  rms_norm_eps: float = 1e-6
  tie_word_embeddings: bool = False
  max_position_embeddings: int = 32768
  bos_token_id: int | None = None
  eos_token_id: int | None = None
  family: str = "qwen2"  # FAMILIES: qwen2 | qwen3
  # How to run it (not part of the architecture):
  param_dtype: str = "float32"
  compute_dtype: str = "float32"
  remat: str = "none"  # none | full | dots
  attention_impl: str = "xla"  # xla | cudnn | splash | pallas_gpu (full passes, no cache)
  attention_chunk: int = 1024  # xla: query rows per attention block (0 = one block)
  attention_window: int = 0  # xla: no segment is longer (packed rows); 0 = a segment may fill a row
  # LoRA (`model.lora`): rank-r adapters on the `lora_targets` projections, scaled alpha / r
  lora_rank: int = 0  # 0: none (full fine-tuning)
  lora_alpha: float = 16.0
  lora_targets: tuple[str, ...] = ()

  def __post_init__(self):
    if self.num_heads % self.num_kv_heads:
      raise ValueError(
        f"num_heads={self.num_heads} must be a multiple of num_kv_heads="
        f"{self.num_kv_heads} (grouped-query attention)"
      )
    if self.head_dim % 2:
      raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
    if self.remat not in ("none", "full", "dots"):
      raise ValueError(f"remat must be one of none, full, dots, got {self.remat!r}")
    if self.family not in FAMILIES:
      raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {self.family!r}")
    if problem := lora_problem(self.lora_rank, self.lora_targets):
      raise ValueError(problem)
    if self.attention_impl not in FULL_PASS_ATTENTION:
      kinds = ", ".join(FULL_PASS_ATTENTION)
      raise ValueError(f"attention_impl must be one of {kinds}, got {self.attention_impl!r}")

  def replace(self, **kw) -> ModelConfig:
    return dataclasses.replace(self, **kw)

  @property
  def lora_scale(self) -> float:
    """What an adapter's product A @ B is scaled by (peft's `scaling`: alpha / r)."""
    return self.lora_alpha / self.lora_rank if self.lora_rank else 0.0

  def lora_on(self, target: str) -> bool:
    return self.lora_rank > 0 and target in self.lora_targets

  @property
  def qkv_bias(self) -> bool:
    """Qwen2 biases its q/k/v projections."""
    return self.family == "qwen2"

  @property
  def qk_norm(self) -> bool:
    """Qwen3 RMS-normalises each head's queries and keys before RoPE."""
    return self.family == "qwen3"

  @property
  def num_params(self) -> int:
    """Parameters of the model (embeddings, layers, final norm and an untied head), counted from
    the sizes."""
    d, f, v, h, k, dh = (
      self.hidden_size,
      self.intermediate_size,
      self.vocab_size,
      self.num_heads,
      self.num_kv_heads,
      self.head_dim,
    )
    attn = d * h * dh + 2 * d * k * dh + h * dh * d
    attn += (h + 2 * k) * dh if self.qkv_bias else 0
    attn += 2 * dh if self.qk_norm else 0
    layer = attn + 3 * d * f + 2 * d
    return self.num_layers * layer + v * d * (1 if self.tie_word_embeddings else 2) + d

  @classmethod
  def from_hf_dict(cls, d: dict[str, Any], **overrides) -> ModelConfig:
    """Builds the config from a HF `config.json` dict; unsupported features fail clearly."""
    archs = d.get("architectures") or []
    family = d.get("model_type")
    if family is None and archs and archs[0] in FAMILIES.values():
      kind = next(k for k, v in FAMILIES.items() if v == archs[0])
      raise ValueError(
        f'config.json has no model_type: add "model_type": {kind!r} (its architecture is '
        f"{archs[0]})"
      )
    missing = [k for k in REQUIRED_FIELDS if k not in d]
    if missing and family in FAMILIES:
      raise ValueError(
        f"config.json lacks {', '.join(missing)}: a {FAMILIES[family]} config.json names each of "
        f"{', '.join(REQUIRED_FIELDS)}; copy it from the model's release"
      )
    if family not in FAMILIES or (archs and archs[0] != FAMILIES[family]):
      raise ValueError(
        f"unsupported architecture {archs or family!r}: prorl_jax implements "
        f"{', '.join(SUPPORTED_ARCHITECTURES)} (model_type {' or '.join(map(repr, FAMILIES))}); "
        "convert the model or pick a Qwen2 or Qwen3 checkpoint such as "
        "DeepSeek-R1-Distill-Qwen-1.5B"
      )
    if family == "qwen3" and d.get("attention_bias", False):
      raise ValueError("attention_bias=true is not supported for Qwen3 (no released model has it)")
    rope = d.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", None):
      raise ValueError(f"rope_scaling type {rope_type!r} is not supported; only plain RoPE is")
    if d.get("use_sliding_window", False):
      raise ValueError("use_sliding_window=true is not supported; set it false in config.json")
    if d.get("hidden_act", "silu") != "silu":
      raise ValueError(f"hidden_act {d.get('hidden_act')!r} is not supported; Qwen2 uses silu")
    theta = d.get("rope_theta")
    if theta is None:  # transformers 5 may nest it under rope_parameters
      theta = (d.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    heads = d["num_attention_heads"]
    eos = d.get("eos_token_id")
    if isinstance(eos, list):
      eos = eos[0]
    return cls(
      vocab_size=d["vocab_size"],
      hidden_size=d["hidden_size"],
      intermediate_size=d["intermediate_size"],
      num_layers=d["num_hidden_layers"],
      num_heads=heads,
      num_kv_heads=d.get("num_key_value_heads", heads),
      head_dim=d.get("head_dim") or d["hidden_size"] // heads,
      rope_theta=float(theta),
      rms_norm_eps=d.get("rms_norm_eps", 1e-6),
      tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
      max_position_embeddings=d.get("max_position_embeddings", 32768),
      bos_token_id=d.get("bos_token_id"),
      eos_token_id=eos,
      family=family,
      **overrides,
    )

  def to_hf_dict(self) -> dict[str, Any]:
    """A `config.json` that transformers and vLLM load as Qwen2ForCausalLM / Qwen3ForCausalLM."""
    extra = {"attention_bias": False} if self.family == "qwen3" else {}
    return {
      "architectures": [FAMILIES[self.family]],
      "model_type": self.family,
      **extra,
      "vocab_size": self.vocab_size,
      "hidden_size": self.hidden_size,
      "intermediate_size": self.intermediate_size,
      "num_hidden_layers": self.num_layers,
      "num_attention_heads": self.num_heads,
      "num_key_value_heads": self.num_kv_heads,
      "head_dim": self.head_dim,
      "hidden_act": "silu",
      "rope_theta": self.rope_theta,
      "rms_norm_eps": self.rms_norm_eps,
      "tie_word_embeddings": self.tie_word_embeddings,
      "max_position_embeddings": self.max_position_embeddings,
      "use_sliding_window": False,
      "attention_dropout": 0.0,
      "bos_token_id": self.bos_token_id,
      "eos_token_id": self.eos_token_id,
      "torch_dtype": self.param_dtype,
    }


# What DeepSeek-R1-Distill-Qwen models share (their config.json files on the Hugging Face Hub).
_R1_DISTILL = dict(
  head_dim=128,
  rope_theta=10000.0,
  rms_norm_eps=1e-6,
  tie_word_embeddings=False,
  max_position_embeddings=131072,
  bos_token_id=151646,
  eos_token_id=151643,
)


def r1_distill_qwen_1p5b(**kw) -> ModelConfig:
  """DeepSeek-R1-Distill-Qwen-1.5B's architecture (the ProRL base model)."""
  return ModelConfig(
    vocab_size=151936,
    hidden_size=1536,
    intermediate_size=8960,
    num_layers=28,
    num_heads=12,
    num_kv_heads=2,
    **_R1_DISTILL,
    **kw,
  )


def r1_distill_qwen_7b(**kw) -> ModelConfig:
  """DeepSeek-R1-Distill-Qwen-7B's architecture."""
  return ModelConfig(
    vocab_size=152064,
    hidden_size=3584,
    intermediate_size=18944,
    num_layers=28,
    num_heads=28,
    num_kv_heads=4,
    **_R1_DISTILL,
    **kw,
  )


# What the Qwen3 dense models share (their config.json files on the Hugging Face Hub).
_QWEN3 = dict(
  family="qwen3",
  vocab_size=151936,
  head_dim=128,
  num_kv_heads=8,
  rope_theta=1_000_000.0,
  rms_norm_eps=1e-6,
  max_position_embeddings=40960,
  bos_token_id=151643,
  eos_token_id=151645,
)


def _qwen3(hidden: int, intermediate: int, layers: int, heads: int, tied: bool):
  """A Qwen3 dense size (its config.json's sizes; the rest is `_QWEN3`) as a preset function."""

  def preset(**kw) -> ModelConfig:
    return ModelConfig(
      hidden_size=hidden,
      intermediate_size=intermediate,
      num_layers=layers,
      num_heads=heads,
      tie_word_embeddings=tied,
      **_QWEN3,
      **kw,
    )

  return preset


qwen3_1p7b = _qwen3(2048, 6144, 28, 16, tied=True)  # Qwen3-1.7B
qwen3_4b = _qwen3(2560, 9728, 36, 32, tied=True)  # Qwen3-4B
qwen3_8b = _qwen3(4096, 12288, 36, 32, tied=False)  # Qwen3-8B


# Architectures by name, for what needs a model's shapes but not its weights (the compile tool's
# model.path): the Hub names, with or without their organisation.
PRESETS = {
  "deepseek-r1-distill-qwen-1.5b": r1_distill_qwen_1p5b,
  "deepseek-r1-distill-qwen-7b": r1_distill_qwen_7b,
  "qwen3-1.7b": qwen3_1p7b,
  "qwen3-4b": qwen3_4b,
  "qwen3-8b": qwen3_8b,
}


def preset(name: str):
  """The architecture function named `name` ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
  "Qwen/Qwen3-4B"), or None."""
  return PRESETS.get(name.lower().split("/", 1)[-1])


def tiny(vocab_size: int = 32, **kw) -> ModelConfig:
  """The CPU demo's ~1M-parameter model."""
  base = dict(
    vocab_size=vocab_size,
    hidden_size=128,
    intermediate_size=512,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=32,
    rope_theta=10000.0,
    tie_word_embeddings=True,
    max_position_embeddings=512,
  )
  base.update(kw)
  return ModelConfig(**base)
