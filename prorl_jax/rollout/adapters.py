"""A LoRA run's weight versions in megabytes: each version on the exchange is a PEFT adapter
directory (`adapter_model.safetensors`, `adapter_config.json`) and `base.json`, which names the
frozen base model the run published once (`WeightStore.publish_base`, under a content address).
A worker fetches the base once, then only the adapters of each version, and its engine applies
them (`Engine.load_adapted`): the JAX engine merges them in memory; an engine that loads only
whole model directories gets one written beside the version (`merge_into`).

No JAX here: vLLM's environment has none. Tensors are numpy (safetensors reads bfloat16 weights
through ml_dtypes, which tensorstore brings to both environments).
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
BASE_FILE = "base.json"  # {"base": the base's id on the exchange}
# A peft key's prefix before the HF parameter's name (`model.layers.{i}.self_attn.q_proj`).
PEFT_PREFIX = "base_model.model."


def _numpy_safetensors():
  """safetensors' numpy API, with numpy's bfloat16 registered (ml_dtypes), as which it reads
  bf16 weights: imported only where weights are read or written."""
  import ml_dtypes  # noqa: F401 - why: registers the bfloat16 dtype safetensors maps BF16 to
  import safetensors.numpy

  return safetensors.numpy


def peft_config(rank: int, alpha: float, targets, base: str) -> dict:
  """The adapter_config.json of adapters of `rank`, `alpha` on `targets` over `base`: what
  `peft.PeftModel.from_pretrained` and vLLM's LoRA loader read."""
  return {
    "peft_type": "LORA",
    "task_type": "CAUSAL_LM",
    "base_model_name_or_path": base,
    "r": int(rank),
    "lora_alpha": float(alpha),
    "lora_dropout": 0.0,
    "target_modules": list(targets),
    "bias": "none",
    "fan_in_fan_out": False,
    "inference_mode": True,
    "use_rslora": False,
    "use_dora": False,
  }


def write_adapter(out: str, tensors: dict[str, np.ndarray], config: dict) -> None:
  """A PEFT adapter directory at `out`: `tensors` (peft's names) and `config`."""
  os.makedirs(out, exist_ok=True)
  _numpy_safetensors().save_file(
    tensors, os.path.join(out, ADAPTER_WEIGHTS), metadata={"format": "pt"}
  )
  with open(os.path.join(out, ADAPTER_CONFIG), "w") as f:
    json.dump(config, f, indent=2)


def write_version(out: str, tensors: dict[str, np.ndarray], config: dict, base_id: str) -> None:
  """A LoRA version's files at `out`: the adapter directory and `base.json` naming its base."""
  write_adapter(out, tensors, config)
  with open(os.path.join(out, BASE_FILE), "w") as f:
    json.dump({"base": base_id}, f)


def base_of(version_dir: str) -> str | None:
  """The base id an adapter version names (None: a whole model directory). A `base.json`
  that names none is a ValueError (the version is not usable)."""
  path = os.path.join(version_dir, BASE_FILE)
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    base = json.load(f).get("base")
  if not isinstance(base, str) or not base:
    raise ValueError(f"{path} names no base model")
  return base


def read_config(adapter_dir: str) -> dict:
  """The adapter_config.json of a PEFT adapter directory."""
  with open(os.path.join(adapter_dir, ADAPTER_CONFIG)) as f:
    return json.load(f)


def read_adapter(adapter_dir: str) -> tuple[dict, dict[str, np.ndarray]]:
  """(adapter_config.json, the adapter tensors in float32) of a PEFT adapter directory."""
  load_file = _numpy_safetensors().load_file
  config = read_config(adapter_dir)
  tensors = load_file(os.path.join(adapter_dir, ADAPTER_WEIGHTS))
  return config, {k: np.asarray(v, np.float32) for k, v in tensors.items()}


def deltas(adapter_dir: str) -> dict[str, np.ndarray]:
  """{HF parameter name: scale · B @ A} [out, in] in float32, per adapted weight of an adapter
  directory (scale = lora_alpha / r, as peft merges)."""
  config, tensors = read_adapter(adapter_dir)
  scale = float(config["lora_alpha"]) / int(config["r"])
  out = {}
  for key, a in tensors.items():
    if not key.endswith(".lora_A.weight"):
      continue
    stem = key[: -len(".lora_A.weight")]
    b = tensors[f"{stem}.lora_B.weight"]
    out[stem.removeprefix(PEFT_PREFIX) + ".weight"] = scale * (b @ a)
  return out


def _merge_file(src: str, dst: str, delta: dict[str, np.ndarray]) -> set[str]:
  """A safetensors file `src` with `delta` added to its tensors of those names, at `dst`
  (each sum in float32, rounded to the tensor's dtype); the names it merged."""
  st = _numpy_safetensors()
  tensors = st.load_file(src)
  done = set()
  for name, d in delta.items():
    if name in tensors:
      w = tensors[name]
      tensors[name] = (w.astype(np.float32) + d).astype(w.dtype)
      done.add(name)
  st.save_file(tensors, dst, metadata={"format": "pt"})
  return done


def merge_into(base_dir: str, version_dir: str, out: str) -> str:
  """A whole HF model directory at `out`: the base's files with the version's adapters merged
  into its weights (what an engine that loads only model directories reads), and the
  version's own files beside them (its probe). Returns `out`; an adapter whose weight the base
  lacks is a ValueError."""
  delta = deltas(version_dir)
  tmp = f"{out.rstrip('/')}.tmp"
  shutil.rmtree(tmp, ignore_errors=True)
  os.makedirs(tmp)
  merged: set[str] = set()
  for name in sorted(os.listdir(base_dir)):
    src = os.path.join(base_dir, name)
    if name == "manifest.json" or not os.path.isfile(src):
      continue
    if name.endswith(".safetensors"):
      merged |= _merge_file(src, os.path.join(tmp, name), delta)
    else:
      shutil.copyfile(src, os.path.join(tmp, name))
  if missing := sorted(set(delta) - merged):
    shutil.rmtree(tmp, ignore_errors=True)
    raise ValueError(f"{version_dir}: the base {base_dir} has no weight {missing[0]}")
  for name in os.listdir(version_dir):
    if name not in (ADAPTER_WEIGHTS, ADAPTER_CONFIG, BASE_FILE, "manifest.json"):
      shutil.copyfile(os.path.join(version_dir, name), os.path.join(tmp, name))
  shutil.rmtree(out, ignore_errors=True)
  os.rename(tmp, out)
  return out
