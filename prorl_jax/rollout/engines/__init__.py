"""The generation engines a rollout worker drives, behind one protocol (`Engine`): the JAX engine
(`jax_engine`: the static sampler `jax_sampler`, also the demo's and the tests', or continuous
batching over a paged KV cache, `paged`) and vLLM
(`vllm`, imported only in vLLM's own environment, which has no JAX)."""

from __future__ import annotations

import importlib
import inspect
from typing import Protocol

import numpy as np

from prorl_jax.config import engines as specs
from prorl_jax.records import Generation, SamplingParams


class Engine(Protocol):
  """What the worker needs of a rollout engine (JAX's or vLLM's)."""

  # |engine - trainer| log-probs on the probe of the version loaded last, if the engine checked
  # it while loading (vLLM does, to catch a bad in-place reload); None: the worker checks.
  last_mismatch: dict | None
  # whether generate takes `between_chunks` (weights swapped while sequences are live)
  inflight_updates: bool

  def load(self, path: str) -> None:
    """Loads (or swaps in) the weights of a published version's HF directory."""

  def load_adapted(self, base_dir: str, adapter_dir: str) -> None:
    """Loads (or swaps in) a LoRA version: the base model's HF directory with the adapters of
    a PEFT directory merged into its weights (`rollout/adapters.py`)."""

  def generate(
    self, prompts: list[list[int]], n: int, sampling: SamplingParams, seed: int, **inflight
  ) -> Generation:
    """The `records.Generation` of n samples of each prompt: prompt-major rows, the engine's
    counts of the call in its typed `stats`, and with in-flight updates (`between_chunks=` a
    function that loads a newer version and returns its number, or None, and `version=` the
    loaded one's) the version of each token."""

  def score_tokens(self, tokens: list[int]) -> np.ndarray:
    """log p(tokens[t] | tokens[:t]) for t >= 1 at temperature 1 (the probe's check)."""


def make_engine(name: str, options: dict | None = None) -> Engine:
  """The engine named by `rollout.engine` with its options (`config.engine_options`), built from
  its descriptor (`specs.ENGINES`); each is imported only when asked for (vLLM's environment has
  no JAX, the trainer's has no vLLM).
  Raises ValueError (one line) on an unknown engine or option."""
  s = specs.spec(name)
  if s.in_trainer:
    raise ValueError(f"the {name} engine runs inside the trainer; workers run {s.worker_engine}")
  # imported by name: vLLM's environment has no JAX, the trainer's has no vLLM
  cls = getattr(importlib.import_module(s.module), s.cls)
  options = options or {}
  params = inspect.signature(cls).parameters
  known = {k for k, p in params.items() if p.kind is not p.VAR_KEYWORD}
  takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())  # vLLM's: its LLM's options
  unknown = sorted(set(options) - known)
  if unknown and not takes_any:
    raise ValueError(
      f"the {name} engine has no option {', '.join(unknown)}; "
      f"its options: {', '.join(sorted(known))}"
    )
  return cls(**options)
