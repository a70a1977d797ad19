"""The generation engines a rollout worker drives, behind one protocol (`Engine`): the JAX
sampler and its engine (`jax_sampler`; the sampler is also the demo's and the tests') and vLLM
(`vllm`, imported only in vLLM's own environment, which has no JAX)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from prorl_jax.records import SamplingParams


class Engine(Protocol):
  """What the worker needs of a rollout engine (JAX's or vLLM's)."""

  # |engine - trainer| log-probs on the probe of the version loaded last, if the engine checked
  # it while loading (vLLM does, to catch a bad in-place reload); None: the worker checks.
  last_mismatch: dict | None

  def load(self, path: str) -> None:
    """Loads (or swaps in) the weights of a published version's HF directory."""

  def generate(self, prompts: list[list[int]], n: int, sampling: SamplingParams, seed: int) -> dict:
    """Prompt-major rows (all n of prompt 0 first): tokens [R, N], logprobs [R, N], lengths [R],
    finish_reason list."""

  def score_tokens(self, tokens: list[int]) -> np.ndarray:
    """log p(tokens[t] | tokens[:t]) for t >= 1 at temperature 1 (the probe's check)."""


def make_engine(name: str, vllm_options: dict | None = None) -> Engine:
  """The engine named by `rollout.engine`; each is imported only when asked for (vLLM's environment
  has no JAX, the trainer's has no vLLM)."""
  if name == "jax":
    # lazy: vLLM's environment has no JAX, the trainer's has no vLLM
    from prorl_jax.rollout.engines.jax_sampler import JaxEngine

    return JaxEngine()
  if name == "vllm":
    from prorl_jax.rollout.engines.vllm import VllmEngine  # lazy: see above

    return VllmEngine(**(vllm_options or {}))
  raise ValueError(f"unknown engine {name!r}; use jax or vllm")
