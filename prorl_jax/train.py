"""`run(cfg)`: the only reader of the config. Sets up the run and drives the RL loop."""

from __future__ import annotations

import os

from absl import logging

from prorl_jax import config as config_lib

R1_DISTILL_HINT = (
    "model.path is empty: download DeepSeek-R1-Distill-Qwen-1.5B on a machine with internet "
    "(`huggingface-cli download deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B --local-dir DIR`), "
    "copy DIR here and pass --config.model.path=DIR")


def resolve_model_path(cfg) -> str:
  """The HF directory to start from; the demo builds its tiny base model when none is given."""
  if cfg.model.path:
    if not os.path.isfile(os.path.join(cfg.model.path, "config.json")):
      raise config_lib.ConfigError(f"model.path={cfg.model.path!r} has no config.json; point it at a "
                              "Hugging Face model directory")
    return cfg.model.path
  if cfg.model.build_tiny:
    from prorl_jax import tiny_base

    return tiny_base.build(os.path.join(cfg.run_dir, "base"), seed=cfg.seed)
  raise config_lib.ConfigError(R1_DISTILL_HINT)


def run(cfg) -> dict:
  config_lib.validate(cfg)
  os.makedirs(cfg.run_dir, exist_ok=True)
  logging.info("resolved config:\n%s", cfg)
  print(cfg, flush=True)
  path = resolve_model_path(cfg)

  from prorl_jax.model import load_hf, load_tokenizer

  model_cfg, params = load_hf(path, dtype=cfg.model.param_dtype,
                              compute_dtype=cfg.model.compute_dtype, remat=cfg.model.remat)
  tokenizer = load_tokenizer(path)
  print(f"loaded {path}: {model_cfg.num_params:,} parameters, vocab {len(tokenizer)}", flush=True)
  return {"model_path": path, "num_params": model_cfg.num_params}
