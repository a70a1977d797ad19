"""The ProRL v2 run on DeepSeek-R1-Distill-Qwen-1.5B. The recipe is the base config's defaults
(`python -m prorl_jax.cli.config` lists them); this file sets only what is particular to the run.

  python -m prorl_jax.main --config=configs/qwen15b.py --config.model.path=/models/r1-distill-1.5b
  python -m prorl_jax.main --config=configs/qwen15b.py:smoke ...   # same pipeline, tiny batch

Variants: "" (the real run), "smoke" (2 steps of 8 prompts x 4 samples, 1024 response tokens,
no in-loop validation: the whole pipeline on any model, a tiny one on a CPU included).
Get the base model on a machine with internet, `hf download
deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B --local-dir DIR`, and pass DIR as model.path; build
the training mix with `python -m prorl_jax.cli.prepare --mix=prorl --out=data/prorl` (data.prepared)
and the evaluation suite with `python -m prorl_jax.cli.prepare --suite=prorl-eval
--out=data/prorl-eval` (in-loop validation on AIME24, Codeforces, GPQA-Diamond, IFEval and
Reasoning Gym graph_color, at most 64 prompts each, 4 samples at the evaluation's temperature
0.6 / top-p 0.95).
"""

from prorl_jax.config import base_config


def get_config(arg=None):
  c = base_config()
  c.run_dir = "runs/prorl_v2_qwen15b"
  c.model.path = ""  # required: the DeepSeek-R1-Distill-Qwen-1.5B directory
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
    raise ValueError(f"unknown variant {arg!r} of configs/qwen15b.py; use '' or 'smoke'")
  return c
