"""The ProRL v2 recipe on a Qwen3 dense model: Qwen3-1.7B, -4B or -8B (the architecture is read
from the model directory's config.json; Qwen3 runs through the same decoder layer as Qwen2, with
its per-head q/k RMSNorm and no q/k/v bias). As configs/qwen15b.py otherwise.

  python -m prorl_jax.main --config=configs/qwen3.py --config.model.path=/models/qwen3-1.7b
  python -m prorl_jax.main --config=configs/qwen3.py:smoke ...   # same pipeline, tiny batch

Get the model with `hf download Qwen/Qwen3-1.7B --local-dir DIR` (or Qwen3-4B, Qwen3-8B). Its chat
template leaves the think block to the model (the response opens `<think>` itself); the reward
reads a response relative to its template either way. `prorl-compile --config=configs/qwen3.py
--config.model.path=Qwen/Qwen3-4B` compiles a step for a chip from the preset alone.
"""

from prorl_jax.config import base_config


def get_config(arg=None):
  c = base_config()
  c.run_dir = "runs/prorl_v2_qwen3"
  c.model.path = ""  # required: the Qwen3 model directory
  c.data.prepared = "data/prorl"
  c.data.val_suite = "data/prorl-eval"
  c.data.val_benchmarks = "aime24,codeforces,gpqa_diamond,ifeval,reasoning_gym/graph_color"
  c.eval.max_prompts = 64
  c.eval.pass_k = "1,4"
  c.rollout.engine = "vllm"
  c.rollout.verifier_processes = 8
  if arg == "smoke":
    c.total_steps = 2
    c.rollout.n = 4
    c.rollout.prompts_per_step = 8
    c.rollout.mini_batch_prompts = 4
    c.rollout.micro_batch_size = 4
    c.rollout.max_response_len = 1024
    c.rollout.verifier_processes = 1
    c.eval.every = 0
    c.data.val_suite = c.data.val_benchmarks = ""
  elif arg:
    raise ValueError(f"unknown variant {arg!r} of configs/qwen3.py; use '' or 'smoke'")
  return c
