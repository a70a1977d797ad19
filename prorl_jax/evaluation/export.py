"""An Orbax checkpoint step of a run as a Hugging Face directory (safetensors + config.json +
tokenizer) that transformers and vLLM load (`prorl-export` is its command).

CHECKPOINT is a step directory (`RUN_DIR/checkpoints/220`), a checkpoints directory (its newest
step) or a run directory (`RUN_DIR`: its `checkpoints/`). Only the policy's parameters are read
(a partial restore: the optimizer state and the reference policy stay on disk). The architecture
and tokenizer come from the model the run started from, recorded in `RUN_DIR/config.json`, or
from `--base`.
"""

from __future__ import annotations

import json
import os

from prorl_jax import config as config_lib
from prorl_jax.model import hf_weights
from prorl_jax.rollout import adapters
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.trainer import run_record


class ExportError(ValueError):
  """A user-fixable problem with the arguments; printed as one line."""


def find_step(path: str) -> str:
  """The Orbax step directory that `path` names (a step, a checkpoints dir, or a run dir)."""
  path = os.path.abspath(path)
  if os.path.isdir(os.path.join(path, "state")):
    return path
  for ckpts in (path, os.path.join(path, "checkpoints")):
    steps = [int(n) for n in os.listdir(ckpts) if n.isdigit()] if os.path.isdir(ckpts) else []
    steps = [s for s in steps if os.path.isdir(os.path.join(ckpts, str(s), "state"))]
    if steps:
      return os.path.join(ckpts, str(max(steps)))
  raise ExportError(
    f"{path} holds no Orbax checkpoint (want RUN_DIR, RUN_DIR/checkpoints or "
    "RUN_DIR/checkpoints/<step>)"
  )


def base_model_dir(step_dir: str, base: str | None) -> str:
  """The HF directory of the run's starting model: `base`, else the run's record of it."""
  if base:
    if not os.path.isfile(os.path.join(base, "config.json")):
      raise ExportError(
        f"--base={base!r} has no config.json; give the Hugging Face directory the run started from"
      )
    return base
  run_dir = os.path.dirname(os.path.dirname(step_dir))  # RUN_DIR/checkpoints/<step>
  record = os.path.join(run_dir, run_record.RUN_RECORD)
  path = (run_record.read(run_dir) or {}).get("model_path")
  if not isinstance(path, str):
    raise ExportError(
      f"no record of the base model in {record}; pass --base=HF_DIR (the "
      "model the run started from)"
    )
  if not os.path.isfile(os.path.join(path, "config.json")):
    raise ExportError(f"the run's base model {path!r} (from {record}) is gone; pass --base=HF_DIR")
  return path


def run_lora(step_dir: str) -> dict:
  """The run's LoRA settings from its record (`lora.*`): ModelConfig's keywords, {} for full
  fine-tuning (a run recorded before LoRA existed too)."""
  run_dir = os.path.dirname(os.path.dirname(step_dir))
  section = ((run_record.read(run_dir) or {}).get("config") or {}).get("lora") or {}
  if not section.get("rank"):
    return {}
  targets = tuple(config_lib.items(section["targets"]))
  return dict(lora_rank=section["rank"], lora_alpha=section["alpha"], lora_targets=targets)


def write_adapter(model_cfg, params, out: str, base: str) -> None:
  """The adapters as a PEFT adapter directory (adapter_model.safetensors and adapter_config.json)
  that `peft.PeftModel.from_pretrained(base_model, out)` loads."""
  from prorl_jax.model import lora  # why: JAX loads only to export (see `export`)

  m = model_cfg
  config = adapters.peft_config(m.lora_rank, m.lora_alpha, m.lora_targets, base)
  adapters.write_adapter(out, lora.to_peft(m, params), config)


def export(
  checkpoint: str, out: str, base: str | None = None, dtype: str = "bfloat16", adapter=False
) -> str:
  """Writes the checkpoint's policy as a HF directory at `out` (a LoRA run's adapters merged into
  its base), or with `adapter` its adapters as a PEFT adapter directory; returns the step
  directory."""
  # lazy: JAX and Orbax load only to export; the run record and the CLI's errors need neither
  import jax
  import numpy as np
  import orbax.checkpoint as ocp

  from prorl_jax.model import hf_weights, init_params, lora, presets, save_hf

  if dtype not in ("bfloat16", "float32", "float16"):
    raise ExportError(f"--dtype must be bfloat16, float16 or float32, got {dtype!r}")
  step_dir = find_step(checkpoint)
  base = base_model_dir(step_dir, base)
  adapted = run_lora(step_dir)
  if adapter and not adapted:
    raise ExportError(f"{step_dir} is a run without LoRA (lora.rank 0): no adapter to export")
  model_cfg = presets.ModelConfig.from_hf_dict(hf_weights.read_hf_config(base), **adapted)
  abstract = jax.eval_shape(lambda: init_params(model_cfg, jax.random.PRNGKey(0)))
  target = {"params": jax.tree.map(lambda a: np.zeros(a.shape, a.dtype), abstract)}
  args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), target)
  try:
    restored = ocp.PyTreeCheckpointer().restore(
      os.path.join(step_dir, "state"),
      args=ocp.args.PyTreeRestore(item=target, restore_args=args, partial_restore=True),
    )
  except (ValueError, KeyError) as e:
    raise ExportError(
      f"{step_dir} does not hold parameters of {base}'s architecture "
      f"({type(e).__name__}: {str(e)[:160]}); pass the right --base"
    ) from None
  if os.path.exists(out) and os.listdir(out):
    raise ExportError(f"{out} exists and is not empty; give a new directory")
  if adapter:
    write_adapter(model_cfg, restored["params"], out, base)
    return step_dir
  model_cfg, params = lora.merged(model_cfg, restored["params"])
  save_hf(model_cfg, params, out, tokenizer_dir=base, dtype=dtype)
  return step_dir


def is_hf_dir(path: str) -> bool:
  """A Hugging Face model directory: a config.json naming a model type (a run directory's own
  config.json, the run record, names none)."""
  try:
    with open(os.path.join(path, "config.json")) as f:
      doc = json.load(f)
  except (OSError, ValueError):
    return False
  return isinstance(doc, dict) and "model_type" in doc


def resolve_model(checkpoint: str, scratch: str) -> tuple[str, str]:
  """(Hugging Face directory, label) of a model named by `checkpoint`: a run directory (its
  newest checkpoint), a checkpoints or step directory (exported under `scratch` once), a
  Hugging Face directory, or EXCHANGE@VERSION (a published version, fetched under `scratch`).
  The label names the source: the HF directory, the step directory, or EXCHANGE@VERSION."""
  is_orbax = os.path.isdir(os.path.join(checkpoint, "checkpoints")) or os.path.isdir(
    os.path.join(checkpoint, "state")
  )
  if not is_orbax and is_hf_dir(checkpoint):
    missing = hf_weights.missing_files(checkpoint)
    if missing:  # before any worker starts on it
      raise ExportError(f"--checkpoint={checkpoint!r} has {missing}")
    path = os.path.abspath(checkpoint)
    return path, path
  if "@" in checkpoint and not os.path.exists(checkpoint):
    url, version = checkpoint.rsplit("@", 1)
    if not version.isdigit():
      raise ExportError(f"--checkpoint={checkpoint!r}: a published version is EXCHANGE@N")
    dest = os.path.join(scratch, f"model-v{version}")
    path = Exchange(url if "://" in url else f"file://{os.path.abspath(url)}").weights.fetch(
      int(version), dest
    )
    if path is None:
      raise ExportError(f"--checkpoint={checkpoint!r}: version {version} is not published on {url}")
    return path, checkpoint
  try:
    step_dir = find_step(checkpoint)
  except (ExportError, OSError) as e:
    raise ExportError(
      f"--checkpoint={checkpoint!r} is neither a run directory, a checkpoint, a Hugging Face "
      f"directory nor EXCHANGE@VERSION ({e})"
    ) from None
  dest = os.path.join(scratch, f"model-step-{os.path.basename(step_dir)}")
  if not is_hf_dir(dest):
    export(step_dir, dest)
  return dest, step_dir
