"""What a run directory records about itself (RUN_DIR/config.json) and how a second start
of the same run treats it: a config changed in what it learns is refused unless accepted."""

from __future__ import annotations

import json
import logging
import os
import time

from prorl_jax import config as config_lib

log = logging.getLogger("prorl_jax.trainer.loop")

RUN_RECORD = "config.json"  # RUN_DIR's record of itself: `record_run` writes it, `read` reads it

# Keys a resumed run may change without --accept_config_changes: how long and where it runs,
# not what it learns (a run directory moved or copied elsewhere resumes there).
OPERATIONAL_KEYS = (
  "run_dir",
  "model.name",  # a label: the weights are model.path's
  "total_steps",
  "rollout.timeout_s",
  "rollout.local_workers",
  "rollout.external_workers",
  "rollout.worker_python",
  "rollout.exchange",
  "checkpoint.keep",
  "checkpoint.async_save",
  "metrics.tensorboard",
  "metrics.wandb_project",
  "dist.coordinator",
  "dist.num_processes",
  "dist.process_id",
  "dist.auto",
  "dist.timeout_s",
  "eval.every",
)


def read(run_dir: str) -> dict | None:
  """The record of the run in `run_dir` (None: none there, or not a JSON object)."""
  try:
    with open(os.path.join(run_dir, RUN_RECORD)) as f:
      rec = json.load(f)
  except (OSError, ValueError):
    return None
  return rec if isinstance(rec, dict) else None


def _recorded(cfg) -> dict | None:
  return read(cfg.run_dir)


def config_changes(cfg) -> list[str]:
  """ "key: old -> new" for each learning-relevant key that differs from the run's record. A
  key the record lacks (a field added since the run started) at its default is no change: a
  new field's default is what the project did before it existed."""
  rec = _recorded(cfg)
  if rec is None or "config" not in rec:
    return []
  old = config_lib.leaves(rec["config"])
  new = config_lib.leaves(cfg.to_dict())
  default = config_lib.flat(config_lib.base_config())
  return [
    f"{k}: {old.get(k)!r} -> {new.get(k)!r}"
    for k in sorted(set(old) | set(new))
    if old.get(k) != new.get(k)
    and k not in OPERATIONAL_KEYS
    and not (k not in old and k in default and new.get(k) == default[k])
  ]


def latest_local_step(cfg) -> int | None:
  """The newest checkpoint step in a local checkpoint directory (None: none, or not local)."""
  d = cfg.checkpoint.dir or os.path.join(cfg.run_dir, "checkpoints")
  if "://" in d or not os.path.isdir(d):
    return None
  steps = [int(n) for n in os.listdir(d) if n.isdigit()]
  return max(steps) if steps else None


def has_checkpoint(cfg) -> bool:
  return latest_local_step(cfg) is not None


def check_resume_config(cfg, accept: bool) -> list[str]:
  """A run that resumes must learn as it did: a changed config stops it, in one line listing the
  differences, unless `accept` (then they are logged and recorded)."""
  changes = config_changes(cfg) if has_checkpoint(cfg) else []
  if changes and not accept:
    raise config_lib.ConfigError(
      f"{cfg.run_dir} was trained with another config ({'; '.join(changes)}); resume with "
      "--accept_config_changes to go on with the new values, or use another run_dir"
    )
  for c in changes:
    log.warning("resuming with a changed config: %s", c)
  return changes


def record_run(cfg, model_path: str, changes: list[str] | None = None):
  """RUN_DIR/config.json: the resolved config, the base model's directory (what `export` and a
  resumed run read back) and the accepted config changes of earlier resumes."""
  rec = _recorded(cfg) or {}
  history = rec.get("accepted_changes", []) + (
    [{"time": time.strftime("%Y-%m-%d %H:%M:%S"), "changes": changes}] if changes else []
  )
  with open(os.path.join(cfg.run_dir, RUN_RECORD), "w") as f:
    json.dump(
      {
        "model_path": os.path.abspath(model_path),
        "config": cfg.to_dict(),
        "accepted_changes": history,
      },
      f,
      indent=1,
    )
