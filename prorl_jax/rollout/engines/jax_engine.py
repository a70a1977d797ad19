"""The JAX engine a rollout worker drives: the model loaded from a published HF directory,
generation by the static sampler (`jax_sampler`) or continuous batching (`paged`), and the
probe's scoring."""

from __future__ import annotations

import functools

import jax
import numpy as np

from prorl_jax.model import load_hf, log_probs, lora
from prorl_jax.model.tokenizer import load_tokenizer
from prorl_jax.records import SamplingParams
from prorl_jax.rollout import adapters
from prorl_jax.rollout.engines import jax_sampler, paged, paged_kernels


class JaxEngine:
  """The JAX engine (CPU or any JAX device): `batching="static"` runs `generate` (one batch until
  its longest row ends); `"continuous"` runs `paged.PagedEngine` (`slots`, `page_size`, `pages`,
  `steps_per_sync`: its `PagedConfig`; `attention` over the pages: `auto` for JAX's Pallas
  paged-attention kernel on a TPU or GPU where it fits, else XLA, or `xla`, `pallas`). `dtype`:
  of the loaded weights and the computation (float32, or bfloat16 on accelerators: half the
  memory and bandwidth). Both draw a sequence's tokens from (seed, row, t) only, so they
  return the same rows for the same request."""

  def __init__(
    self,
    batching: str = "static",
    slots: int = 64,
    page_size: int = 16,
    pages: int = 0,
    steps_per_sync: int = 16,
    attention: str = "auto",
    dtype: str = "float32",
  ):
    if batching not in ("static", "continuous"):
      raise ValueError(f"JaxEngine batching must be static or continuous, got {batching!r}")
    if attention not in ("auto",) + paged_kernels.ATTENTION:
      kinds = ", ".join(("auto",) + paged_kernels.ATTENTION)
      raise ValueError(f"JaxEngine attention must be one of {kinds}, got {attention!r}")
    if dtype not in ("float32", "bfloat16"):
      raise ValueError(f"JaxEngine dtype must be float32 or bfloat16, got {dtype!r}")
    self.batching, self.attention, self.dtype = batching, attention, dtype
    self.paged = dict(slots=slots, page_size=page_size, pages=pages, steps_per_sync=steps_per_sync)
    self.model_cfg = self.params = self.weights = self._score = None
    self._base = None  # a LoRA run's base: (directory, model config, params, pad id)
    self._paged: paged.PagedEngine | None = None  # built once per model, given each version
    self.pad = 0
    self.last_mismatch = None  # the worker checks the probe

  def load(self, path: str) -> None:
    model_cfg, params = load_hf(path, dtype=self.dtype)
    tok = load_tokenizer(path)
    self.set_params(model_cfg, params, tok.pad_token_id if tok.pad_token_id is not None else 0)

  def load_adapted(self, base_dir: str, adapter_dir: str) -> None:
    """A LoRA version: the base loaded once (kept for later versions), each version's
    adapters merged into it in memory (`lora.merged`), no model directory written."""
    if self._base is None or self._base[0] != base_dir:
      model_cfg, params = load_hf(base_dir, dtype=self.dtype)
      tok = load_tokenizer(base_dir)
      pad = tok.pad_token_id if tok.pad_token_id is not None else 0
      self._base = (base_dir, model_cfg, params, pad)
    _, model_cfg, params, pad = self._base
    config, tensors = adapters.read_adapter(adapter_dir)
    adapted = model_cfg.replace(
      lora_rank=int(config["r"]),
      lora_alpha=float(config["lora_alpha"]),
      lora_targets=tuple(config["target_modules"]),
    )
    merged_cfg, merged = lora.merged(
      adapted, lora.with_adapters(params, lora.from_peft(adapted, tensors))
    )
    self.set_params(merged_cfg, merged, pad)

  def set_params(self, model_cfg, params, pad_id: int) -> None:
    """Generates with `params` (already on their devices, in any sharding) from now on: what
    `load` does with a published directory, and the trainer's own engine with its params."""
    if self.model_cfg != model_cfg:
      self._score = self._paged = None  # jitted or built for one model config
    self.model_cfg, self.params, self.pad = model_cfg, params, pad_id
    self.weights = jax_sampler.prepare(self.model_cfg, self.params)  # once per version
    if self._paged is not None:
      self._paged.set_weights(self.params, self.weights)

  def paged_config(self, head_dim: int, backend: str | None = None) -> paged.PagedConfig:
    """The continuous-batching engine's shape for a model of `head_dim`, its attention chosen
    for this host's backend, or for `backend`'s chips (the compile tool's target: a Pallas
    kernel is then named for it, `pallas_tpu`, `pallas_gpu`)."""
    on = backend or jax.default_backend()
    attention = paged_kernels.choose_attention(
      self.attention, head_dim, self.paged["page_size"], on
    )
    if backend and attention == "pallas":
      attention = f"pallas_{backend}"  # the target's kernel, not this host's backend's
    return paged.PagedConfig(**self.paged, attention=attention)

  def _continuous(self) -> paged.PagedEngine:
    """The continuous-batching engine, built on first use for the loaded model."""
    if self._paged is None:
      pc = self.paged_config(self.model_cfg.head_dim)
      self._paged = paged.PagedEngine(self.model_cfg, self.params, pc, weights=self.weights)
    return self._paged

  def score_tokens(self, tokens: list[int]) -> np.ndarray:
    if self._score is None:  # jitted once: the probe is checked after every weight reload
      self._score = jax.jit(functools.partial(log_probs, self.model_cfg))
    lp = np.asarray(self._score(self.params, np.asarray([tokens], np.int32)))[0, :-1]
    return lp[np.arange(len(tokens) - 1), tokens[1:]]

  @property
  def inflight_updates(self) -> bool:
    """Continuous batching can swap weights between its device calls."""
    return self.batching == "continuous"

  def generate(self, prompts, n, sampling: SamplingParams, seed, between_chunks=None, version=0):
    """See `Engine.generate`; `between_chunks()` (continuous batching only) returns a newer
    version it has just loaded into this engine, or None: generation continues with it.
    `version`: the loaded weights' version, recorded for the tokens drawn before any swap."""
    if between_chunks is not None and not self.inflight_updates:
      raise ValueError("in-flight weight updates need the JAX engine's continuous batching")
    if self.batching == "continuous":
      engine = self._continuous()
      swap = None
      if between_chunks is not None:

        def swap():
          newer = between_chunks()
          return None if newer is None else (newer, self.params, self.weights)

      return engine.generate(
        prompts, n, sampling, seed=seed, pad_id=self.pad, between_chunks=swap, version=version
      )
    rows = [p for p in prompts for _ in range(n)]
    return jax_sampler.generate(
      self.model_cfg, self.params, rows, sampling, seed=seed, pad_id=self.pad, weights=self.weights
    )
