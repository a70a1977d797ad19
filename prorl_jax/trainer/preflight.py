"""What a run checks before it loads anything: the optional packages its config asks for (a
one-line error that says how to install them), and the flags that cannot act in the configured
run (a warning each: an ablation that changes nothing should say so before it costs a day)."""

from __future__ import annotations

import importlib.util
import math

from prorl_jax import config as config_lib

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

  def chosen(key: str) -> bool:
    return got[key] != base[key]

  a, out = cfg.algo, []
  if updates_per_step(cfg) == 1:
    keys = [k for k in ("algo.clip_low", "algo.clip_high", "algo.dual_clip") if chosen(k)]
    if keys:
      out.append(
        f"{', '.join(keys)} cannot act: rollout.prompts_per_step / rollout.mini_batch_prompts "
        "x algo.epochs = 1 optimizer update per step, so the ratio to the old policy is 1 on "
        "every token and nothing is clipped; lower rollout.mini_batch_prompts or raise "
        "algo.epochs"
      )
  if a.kl_coef == 0:
    keys = [
      k
      for k in ("algo.kl_kind", "algo.kl_clamp", "algo.kl_in_reward", "algo.ref_reset_kl_spike")
      if chosen(k)
    ]
    if keys:
      out.append(f"{', '.join(keys)} cannot act with algo.kl_coef=0 (no KL term)")
    if (a.ref_reset_every or a.ref_reset_stall_evals) and not a.ref_reset_optimizer:
      out.append(
        "reference resets (algo.ref_reset_every / ref_reset_stall_evals) change nothing with "
        "algo.kl_coef=0: the reference policy is used only by the KL term"
      )
  if 0 < a.ref_reset_every and a.ref_reset_every >= cfg.total_steps and a.kl_coef:
    out.append(
      f"algo.ref_reset_every={a.ref_reset_every} >= total_steps={cfg.total_steps}: no "
      "scheduled reference reset happens in this run"
    )
  for key, needs in (
    ("algo.tis_cap", ("algo.is_correction", "tis")),
    ("algo.icepop_low", ("algo.is_correction", "icepop")),
    ("algo.icepop_high", ("algo.is_correction", "icepop")),
    ("algo.length_penalty_on_steps", ("algo.length_penalty", "scheduled")),
    ("algo.length_penalty_off_steps", ("algo.length_penalty", "scheduled")),
  ):
    if chosen(key) and got[needs[0]] != needs[1]:
      out.append(f"{key} acts only with {needs[0]}={needs[1]} (it is {got[needs[0]]!r})")
  if chosen("algo.overlong_factor") and not a.overlong_buffer:
    out.append("algo.overlong_factor cannot act with algo.overlong_buffer=0 (the penalty is off)")
  if chosen("algo.max_gen_rounds") and not a.dynamic_sampling:
    out.append("algo.max_gen_rounds cannot act with algo.dynamic_sampling=False (no refill)")
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
