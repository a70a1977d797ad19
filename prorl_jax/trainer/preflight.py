"""What a run checks before it loads anything: the optional packages its config asks for (a
one-line error that says how to install them), the flags that cannot act in the configured run
(a warning each: an ablation that changes nothing should say so before it costs a day), the
settings that learn less than a close alternative (`advice`, logged),
(`before_loading`) its run directory, model, data, exchange and worker Python, and the code
sandbox once the data says it needs one (`check_code_sandbox`, from `setup.build`)."""

from __future__ import annotations

import importlib.util
import logging
import math
import os

import jax

from prorl_jax import config as config_lib
from prorl_jax import sandbox
from prorl_jax.data.sources import precheck
from prorl_jax.model import hf_weights
from prorl_jax.model.presets import ModelConfig
from prorl_jax.rollout.local import check_worker_python
from prorl_jax.rollout.store import InvalidExchange, open_store
from prorl_jax.trainer import placement, run_dir
from prorl_jax.trainer.run_record import RUN_RECORD, check_resume_config, latest_local_step

log = logging.getLogger("prorl_jax.trainer.loop")

# metrics.wandb_project needs it; the extra installs the pinned version
WANDB_FIX = "pip install -e '.[wandb]' (or: make venv EXTRAS=wandb)"


def check_installed(cfg) -> None:
  """Raises ConfigError (one line, with the fix) for an optional package the config asks for
  and this environment lacks."""
  if cfg.metrics.wandb_project and importlib.util.find_spec("wandb") is None:
    raise config_lib.ConfigError(
      f"metrics.wandb_project={cfg.metrics.wandb_project!r} needs the wandb package, which is "
      f"not installed: {WANDB_FIX}"
    )


def updates_per_step(cfg) -> int:
  r = cfg.rollout
  return math.ceil(r.prompts_per_step / r.mini_batch_prompts) * cfg.algo.epochs


def inert_flags(cfg) -> list[str]:
  """One line per flag that cannot act in this run: set away from its default (or, where
  noted, left at a default that does nothing here)."""
  base = config_lib.flat(config_lib.base_config())
  got = config_lib.flat(cfg)
  chosen = {k for k in got if got[k] != base.get(k)}
  rules = (_inert_clipping, _inert_kl, _inert_schedules, _inert_dependents)
  return [line for rule in rules for line in rule(cfg, chosen, got)]


def _inert_clipping(cfg, chosen: set, got: dict) -> list[str]:
  keys = [k for k in ("algo.clip_low", "algo.clip_high", "algo.dual_clip") if k in chosen]
  if updates_per_step(cfg) != 1 or not keys:
    return []
  return [
    f"{', '.join(keys)} cannot act: rollout.prompts_per_step / rollout.mini_batch_prompts "
    "x algo.epochs = 1 optimizer update per step, so the ratio to the old policy is 1 on "
    "every token and nothing is clipped; lower rollout.mini_batch_prompts or raise "
    "algo.epochs"
  ]


def _inert_kl(cfg, chosen: set, got: dict) -> list[str]:
  a, out = cfg.algo, []
  if a.kl_coef != 0:
    return out
  kl_keys = ("algo.kl_kind", "algo.kl_clamp", "algo.kl_in_reward", "algo.ref_reset_kl_spike")
  keys = [k for k in kl_keys if k in chosen]
  if keys:
    out.append(f"{', '.join(keys)} cannot act with algo.kl_coef=0 (no KL term)")
  if (a.ref_reset_every or a.ref_reset_stall_evals) and not a.ref_reset_optimizer:
    out.append(
      "reference resets (algo.ref_reset_every / ref_reset_stall_evals) change nothing with "
      "algo.kl_coef=0: the reference policy is used only by the KL term"
    )
  return out


def _inert_schedules(cfg, chosen: set, got: dict) -> list[str]:
  a, out = cfg.algo, []
  if 0 < a.ref_reset_every and a.ref_reset_every >= cfg.total_steps and a.kl_coef:
    out.append(
      f"algo.ref_reset_every={a.ref_reset_every} >= total_steps={cfg.total_steps}: no "
      "scheduled reference reset happens in this run"
    )
  if a.length_penalty != "off" and a.length_penalty_min == a.length_penalty_max:
    out.append(
      "the cosine length penalty is a constant with length_penalty_min = length_penalty_max "
      f"= {a.length_penalty_min}: it scales every reward alike"
    )
  if cfg.eval.every > cfg.total_steps:
    out.append(
      f"eval.every={cfg.eval.every} > total_steps={cfg.total_steps}: the run validates only "
      "at its start and end"
    )
  return out


# a flag that acts only when another has a value (flag -> (the other, its value))
_NEEDS = {
  "algo.tis_cap": ("algo.is_correction", "tis"),
  "algo.icepop_low": ("algo.is_correction", "icepop"),
  "algo.icepop_high": ("algo.is_correction", "icepop"),
  "algo.length_penalty_on_steps": ("algo.length_penalty", "scheduled"),
  "algo.length_penalty_off_steps": ("algo.length_penalty", "scheduled"),
}


def _inert_dependents(cfg, chosen: set, got: dict) -> list[str]:
  a = cfg.algo
  out = [
    f"{key} acts only with {other}={want} (it is {got[other]!r})"
    for key, (other, want) in _NEEDS.items()
    if key in chosen and got[other] != want
  ]
  if "algo.overlong_factor" in chosen and not a.overlong_buffer:
    out.append("algo.overlong_factor cannot act with algo.overlong_buffer=0 (the penalty is off)")
  if "algo.max_gen_rounds" in chosen and not a.dynamic_sampling:
    out.append("algo.max_gen_rounds cannot act with algo.dynamic_sampling=False (no refill)")
  if "vllm.lora" in chosen and not (cfg.lora.rank and cfg.lora.publish == "adapters"):
    out.append(
      "vllm.lora acts only on a LoRA run's adapter versions (lora.rank > 0, "
      f"lora.publish=adapters; they are {cfg.lora.rank}, {cfg.lora.publish!r})"
    )
  return out


def before_loading(cfg, plan, accept_config_changes: bool):
  """The primary's checks of the run directory and of what the run needs (the model, the data
  and the workers as the run's `Plan` holds them), before any heavy work: (summary of a finished
  run or None, the config changes a resumed run accepts)."""
  log.info("run %s: its config goes to %s", cfg.run_dir, os.path.join(cfg.run_dir, RUN_RECORD))
  for line in advice(cfg):
    log.warning(line)
  changes = check_resume_config(cfg, accept_config_changes)
  last = latest_local_step(cfg)
  stop = run_dir.stopped_before(plan.run_dir)  # stopped before the last step's validation
  pending = bool(stop.get("pending_tail")) and stop.get("stopped_at") == last
  done = last is not None and last >= plan.total_steps
  done = done and run_dir.summarized_step(plan.run_dir) == last
  if done and jax.process_count() == 1 and not pending:
    print(run_dir.finished_line(plan.run_dir, last, plan.total_steps), flush=True)
    return {"finished": True, "steps": last}, changes
  check_model_path(plan.model_path)  # is the model there, and are the data files and rows?
  precheck(plan.data)
  try:  # ... and can the exchange be opened?
    open_store(plan.rollout.exchange_url)
  except InvalidExchange as e:
    raise config_lib.ConfigError(f"rollout.exchange: {e}") from None
  wp = plan.workers
  if wp.count:  # can the workers run at all?
    check_worker_python(wp.python, wp.engine)
  return None, changes


def check_run_dir(path: str) -> None:
  """A run directory that is a file is one line, before anything is made."""
  if os.path.exists(path) and not os.path.isdir(path):
    raise config_lib.ConfigError(
      f"run_dir={path} is a file: give a directory (made when missing) for the run"
    )


def check_model_path(path: str) -> None:
  """One line naming what `model.path` lacks (config.json, weights, tokenizer) or what its
  config.json lacks (a field, model_type), before a model is loaded or a worker started."""
  missing = path and hf_weights.missing_files(path)
  if missing:
    raise config_lib.ConfigError(
      f"model.path={path!r} has {missing}; point it at a Hugging Face model directory"
    )
  if path:
    try:
      ModelConfig.from_hf_dict(hf_weights.read_hf_config(path))
    except (ValueError, TypeError) as e:  # json's errors are ValueErrors too
      raise config_lib.ConfigError(f"model.path={path!r}: {e}") from None


def check_code_sandbox(wp: placement.WorkersPlan, verifiers: set[str]):
  """Local workers score code in the bubblewrap sandbox: when the data needs it and it cannot
  run here, stop now with its one-line fix (or run unsandboxed on explicit request, logged)."""
  if "code" not in verifiers or not wp.count:
    return
  if wp.unsandboxed_code:
    log.warning(
      "!!! rollout.unsandboxed_code=True: local workers run code rewards WITHOUT a "
      "sandbox; use only with trusted data"
    )
    return
  err = sandbox.check()
  if err:
    raise config_lib.ConfigError(f"{err} (or set rollout.unsandboxed_code=True for trusted data)")


def advice(cfg) -> list[str]:
  """Settings that run but learn less than a close alternative, each with that alternative."""
  out = []
  if cfg.rollout.pipeline and cfg.algo.is_correction == "icepop":
    out.append(
      "rollout.pipeline=True with algo.is_correction=icepop: ICE-POP's band also drops the tokens "
      "the policy moved most between the sampling version and the trained one; "
      "algo.is_correction=tis keeps them with a capped weight and learns more with the pipeline "
      "(docs/algorithm.md, section 8)"
    )
  return out
