"""What every real run of the recipe sets beyond the base config's defaults, whichever base model
it starts from (`configs/qwen15b.py`, `configs/qwen3.py`): the training mix and the evaluation
suite `prorl-prepare` builds, in-loop validation on them, vLLM rollouts, the host's verifier
processes; and the `smoke` variant (the same pipeline on a tiny batch)."""

from __future__ import annotations

from ml_collections import ConfigDict

from prorl_jax.config import base_config


def reasoning_run(run_dir: str, arg: str | None, config_file: str, name: str = "") -> ConfigDict:
  """The config of a real run in `run_dir`, for variant `arg` ("" or "smoke") of
  `config_file` (named in the error for an unknown variant), on the base model `name` (its
  Hugging Face id; "" when the config serves several); `model.path` left to the user."""
  c = base_config()
  c.run_dir = run_dir
  c.model.path = ""  # required: the base model's directory
  c.model.name = name
  c.data.prepared = "data/prorl"
  c.data.val_suite = "data/prorl-eval"
  c.data.val_benchmarks = "aime24,codeforces,gpqa_diamond,ifeval,reasoning_gym/graph_color"
  c.eval.max_prompts = 64
  c.eval.pass_k = "1,4"
  c.rollout.engine = "vllm"
  c.rollout.verifier_processes = 8  # math-verify and the code sandboxes: the host's cores
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
    raise ValueError(f"unknown variant {arg!r} of {config_file}; use '' or 'smoke'")
  return c
