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

from prorl_jax.config.runs import reasoning_run


def get_config(arg=None):
  # model.path is required: the Qwen3 model directory
  return reasoning_run("runs/prorl_v2_qwen3", arg, "configs/qwen3.py")
