"""`prorl-eval` (= python -m prorl_jax.cli.eval): a model scored on a config's held-out set, or on
the paper's evaluation suite (`evaluation.runner`); the scoring itself is `scoring.evaluate`.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import tempfile

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

from prorl_jax import config as config_lib
from prorl_jax.cli import errors
from prorl_jax.cli.prepare import PrepareError
from prorl_jax.config import base_config, engines
from prorl_jax.data.prompts import DataError
from prorl_jax.data.sources import sources_for
from prorl_jax.evaluation import export, runner, suite_report
from prorl_jax.evaluation.export import ExportError
from prorl_jax.evaluation.runner import DEFAULT_SAMPLES
from prorl_jax.evaluation.serving import ServedModel
from prorl_jax.evaluation.suite_report import SuiteError
from prorl_jax.model.tokenizer import load_tokenizer
from prorl_jax.rollout.local import WorkerFailure
from prorl_jax.trainer import placement
from prorl_jax.trainer.plan import data_spec
from prorl_jax.trainer.scoring import evaluate
from prorl_jax.trainer.workers import eval_workers


def evaluate_checkpoint(cfg, checkpoint: str, log=print) -> dict:
  """Evaluates a model (a run directory's newest checkpoint, a step directory, a HF directory or
  EXCHANGE@VERSION: `export.resolve_model`) on the config's held-out set, through a private
  exchange and local workers."""
  config_lib.validate(cfg)
  with tempfile.TemporaryDirectory() as tmp:
    model_dir, label = export.resolve_model(checkpoint, os.path.join(tmp, "model"))
    log(f"model: {label}" + ("" if label == model_dir else f" (as {model_dir})"))
    # the trainer's own held-out set
    _, items = sources_for(data_spec(cfg), load_tokenizer(model_dir))
    if not items:
      raise config_lib.ConfigError(
        "no held-out items: set data.val_files, data.prepared or data.val_suite"
      )
    sp = config_lib.sampling_params(cfg, eval_mode=True)
    log(
      f"sampling: seed {cfg.seed} (config seed; the run's own validation uses the same), "
      f"{cfg.eval.samples} samples a prompt, temperature {sp.temperature}, top_p {sp.top_p}; "
      "the figure may differ from the run's validation at this step (another dtype, engine or "
      "batching moves the draws: docs/evaluation.md)"
    )
    with ServedModel(model_dir, eval_workers(placement.workers_plan(cfg))) as served:
      return evaluate(
        served.ex,
        items,
        samples=cfg.eval.samples,
        sampling=config_lib.sampling_params(cfg, eval_mode=True),
        version=0,
        ks=config_lib.pass_ks(cfg),
        routing=config_lib.routing_table(cfg),
        timeout_s=cfg.rollout.timeout_s,
        tag="eval",
        seed=cfg.seed,
        on_idle=served.workers.check,
      )


def _suite_config():
  """The suite's rollout settings: --config when given, else vLLM workers as the real run."""
  cfg = flags.FLAGS.config
  if cfg is None:
    cfg = base_config()
    cfg.rollout.engine = "vllm"
  print(
    f"rollouts: the {cfg.rollout.engine} engine, {max(1, placement.worker_count(cfg))} local "
    "worker(s)"
    + (
      ""
      if flags.FLAGS.config
      else " (the default without --config; "
      "--config=FILE with rollout.engine=jax runs without vLLM)"
    ),
    flush=True,
  )
  return cfg


def _domain_counts(items: list[str]) -> dict[str, int]:
  out = {}
  for item in items:
    k, _, v = item.partition("=")
    if k not in DEFAULT_SAMPLES or not v.isdigit() or int(v) < 1:
      raise SuiteError(
        f"--samples {item}: want DOMAIN=N with N >= 1 and DOMAIN one of "
        f"{', '.join(DEFAULT_SAMPLES)}"
      )
    out[k] = int(v)
  return out


def main(argv):
  """`python -m prorl_jax.cli.eval --config=configs/tiny.py --checkpoint=HF_DIR [--out=FILE]`, or
  `python -m prorl_jax.cli.eval --suite=prorl-eval --data=DIR --checkpoint=MODEL --out=DIR`."""
  del argv
  absl_logging.set_verbosity(absl_logging.WARNING)  # Orbax logs every restore step at INFO
  logging.getLogger("absl").setLevel(logging.WARNING)
  F = flags.FLAGS
  with errors.user_errors(
    config_lib.ConfigError, WorkerFailure, PrepareError, ExportError, DataError, ValueError
  ):
    if F.suite:
      if not (F.data and F.checkpoint and F.out):
        raise config_lib.ConfigError(
          "--suite needs --data=DIR (prepare --suite output), --checkpoint=MODEL and --out=DIR"
        )
      cfg = _suite_config()
      config_lib.validate(cfg)
      report = runner.run_suite(
        eval_workers(placement.workers_plan(cfg)),
        seed=cfg.seed,
        timeout_s=cfg.rollout.timeout_s,
        data_dir=F.data,
        checkpoint=F.checkpoint,
        out_dir=F.out,
        max_response_len=F.max_response_len if F["max_response_len"].present else None,
        # the JAX engine's memory is sized by its config; vLLM pages what the model allows
        response_cap=(
          int(cfg.rollout.max_response_len)
          if F.config is not None and engines.spec(cfg.rollout.engine).sized_by_config
          else None
        ),
        samples=_domain_counts(F.samples),
        temperature=F.temperature,
        top_p=F.top_p,
        max_prompt_len=F.max_prompt_len,
        benchmarks=config_lib.items(F.benchmarks) or None,
        references=F.references or suite_report.REFERENCES,
        compare=F.compare,
      )
      print(suite_report.report_markdown(report))
      print(f"wrote {F.out}/report.json, report.md and report.png")
      return
    if F.config is None or not F.checkpoint:
      raise config_lib.ConfigError(
        "give --config=FILE and --checkpoint=MODEL (held-out set of the config; MODEL is a run "
        "directory, a checkpoint step, a HF directory or EXCHANGE@VERSION), or "
        "--suite=prorl-eval --data=DIR"
      )
    result = evaluate_checkpoint(F.config, F.checkpoint)
  text = json.dumps(result, indent=1)
  print(text)
  if F.out:
    with open(F.out, "w") as f:
      f.write(text)


USAGE = """usage: prorl-eval --config=FILE --checkpoint=MODEL [--out=FILE]
       prorl-eval --suite=prorl-eval --data=DIR --checkpoint=MODEL --out=DIR [--config=FILE]
  (= python -m prorl_jax.cli.eval)

The first form scores MODEL on the config's held-out set (JSON); the second runs the paper's
evaluation suite (report.md, report.json, report.png). MODEL is a run directory (its newest
checkpoint), a checkpoint step, a Hugging Face directory or EXCHANGE@VERSION. Without --config
the suite generates with vLLM (.venv-vllm); --config=FILE with rollout.engine=jax uses JAX."""


def cli():
  """The `prorl-eval` console script (= python -m prorl_jax.cli.eval)."""
  config_flags.DEFINE_config_file("config", None, "config file", lock_config=True)
  flags.DEFINE_string(
    "checkpoint",
    None,
    "the model: a run directory (its newest checkpoint), a checkpoint step directory, a Hugging "
    "Face directory or EXCHANGE@VERSION (a published version)",
  )
  flags.DEFINE_string(
    "out", "", "the JSON file (held-out evaluation) or the report directory (--suite)"
  )
  flags.DEFINE_string("suite", "", "prorl-eval: every benchmark of --data")
  flags.DEFINE_string("data", "", "a `python -m prorl_jax.cli.prepare --suite` output directory")
  flags.DEFINE_integer(
    "max_response_len",
    runner.PAPER["max_response_len"],
    "response token budget (--suite); unset: this, lowered to the model's context and, for a "
    "JAX engine, the config's rollout.max_response_len",
  )
  flags.DEFINE_integer(
    "max_prompt_len",
    runner.PAPER["max_prompt_len"],
    "longer prompts are left out, counted (--suite)",
  )
  flags.DEFINE_float("temperature", runner.PAPER["temperature"], "sampling temperature (--suite)")
  flags.DEFINE_float("top_p", runner.PAPER["top_p"], "nucleus sampling (--suite)")
  flags.DEFINE_multi_string(
    "samples",
    [],
    "DOMAIN=N samples per prompt (--suite; default "
    + ", ".join(f"{k} {v}" for k, v in runner.DEFAULT_SAMPLES.items())
    + ")",
  )
  flags.DEFINE_string("benchmarks", "", "comma-separated subset of the suite (--suite)")
  flags.DEFINE_string(
    "references",
    "",
    "published numbers to print beside ours (JSON; default: the package's reference_numbers.json)",
  )
  flags.DEFINE_multi_string(
    "compare",
    [],
    "LABEL=DIR: put the report in DIR (an earlier --suite --out, e.g. of the base model or of "
    "the released ProRL v2 checkpoint) beside ours as a measured column; repeatable",
  )
  flags.register_validator(
    "suite", lambda s: s in ("", "prorl-eval"), message="--suite takes prorl-eval"
  )
  app.run(main, flags_parser=functools.partial(errors.parse_flags, usage=USAGE))


if __name__ == "__main__":
  cli()
