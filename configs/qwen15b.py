"""The ProRL v2 run on DeepSeek-R1-Distill-Qwen-1.5B. The recipe is the base config's defaults
(`python -m prorl_jax.cli.config` lists them); what every real run sets beyond them is
`prorl_jax.config.runs.reasoning_run`.

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

from prorl_jax.config.runs import reasoning_run


def get_config(arg=None):
  # model.path is required to train: the DeepSeek-R1-Distill-Qwen-1.5B directory (model.name)
  return reasoning_run(
    "runs/prorl_v2_qwen15b", arg, "configs/qwen15b.py", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"
  )
