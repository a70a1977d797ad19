"""HF safetensors <-> param pytree, through one declarative table.

Each row maps a HF tensor name to a param path and a reshape rule. Loading (`load_hf`) and
exporting (`save_hf`, also what the exchange publishes for vLLM) read the same table. Layer tensors
(`model.layers.{i}....`) are stacked on a leading L axis, matching the scanned layers.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Callable

import numpy as np
import safetensors
import safetensors.numpy

from prorl_jax.model.presets import ModelConfig

# Reshape rules, HF layout -> ours (`load`) and back (`save`). c is the ModelConfig.
_RULES: dict[str, tuple[Callable, Callable]] = {
  "plain": (lambda w, c: w, lambda p, c: p),
  "T": (lambda w, c: w.T, lambda p, c: p.T),
  # q/k/v weight [N*Dh, D] -> kernel [D, N, Dh]
  "qkv_w": (
    lambda w, c: w.T.reshape(w.shape[1], -1, c.head_dim),
    lambda p, c: p.reshape(p.shape[0], -1).T,
  ),
  # q/k/v bias [N*Dh] -> [N, Dh]
  "qkv_b": (lambda w, c: w.reshape(-1, c.head_dim), lambda p, c: p.reshape(-1)),
  # o_proj weight [D, H*Dh] -> kernel [H, Dh, D]
  "o_w": (
    lambda w, c: w.T.reshape(c.num_heads, c.head_dim, -1),
    lambda p, c: p.reshape(-1, p.shape[-1]).T,
  ),
}

# (HF name, param path, rule); "{i}" marks a per-layer tensor stacked on axis 0.
TABLE: tuple[tuple[str, tuple[str, ...], str], ...] = (
  ("model.embed_tokens.weight", ("embed", "embedding"), "plain"),
  ("model.norm.weight", ("final_norm", "scale"), "plain"),
  ("lm_head.weight", ("lm_head",), "T"),
  ("model.layers.{i}.input_layernorm.weight", ("layers", "input_norm", "scale"), "plain"),
  (
    "model.layers.{i}.post_attention_layernorm.weight",
    ("layers", "post_attn_norm", "scale"),
    "plain",
  ),
  ("model.layers.{i}.self_attn.q_proj.weight", ("layers", "attn", "q_proj", "kernel"), "qkv_w"),
  ("model.layers.{i}.self_attn.q_proj.bias", ("layers", "attn", "q_proj", "bias"), "qkv_b"),
  ("model.layers.{i}.self_attn.k_proj.weight", ("layers", "attn", "k_proj", "kernel"), "qkv_w"),
  ("model.layers.{i}.self_attn.k_proj.bias", ("layers", "attn", "k_proj", "bias"), "qkv_b"),
  ("model.layers.{i}.self_attn.v_proj.weight", ("layers", "attn", "v_proj", "kernel"), "qkv_w"),
  ("model.layers.{i}.self_attn.v_proj.bias", ("layers", "attn", "v_proj", "bias"), "qkv_b"),
  ("model.layers.{i}.self_attn.q_norm.weight", ("layers", "attn", "q_norm", "scale"), "plain"),
  ("model.layers.{i}.self_attn.k_norm.weight", ("layers", "attn", "k_norm", "scale"), "plain"),
  ("model.layers.{i}.self_attn.o_proj.weight", ("layers", "attn", "o_proj", "kernel"), "o_w"),
  ("model.layers.{i}.mlp.gate_proj.weight", ("layers", "mlp", "gate_proj", "kernel"), "T"),
  ("model.layers.{i}.mlp.up_proj.weight", ("layers", "mlp", "up_proj", "kernel"), "T"),
  ("model.layers.{i}.mlp.down_proj.weight", ("layers", "mlp", "down_proj", "kernel"), "T"),
)

TOKENIZER_FILES = (
  "tokenizer.json",
  "tokenizer_config.json",
  "special_tokens_map.json",
  "vocab.json",
  "merges.txt",
  "chat_template.jinja",
  "generation_config.json",
  "added_tokens.json",
)

_BF16_NAMES = {"bfloat16", "bf16"}


def _rows(model_cfg: ModelConfig):
  """The table's rows this model has: no head when tied, no q/k/v bias without one (Qwen3), no
  q/k norms without them (Qwen2)."""
  for hf, path, rule in TABLE:
    if path == ("lm_head",) and model_cfg.tie_word_embeddings:
      continue
    if path[-1] == "bias" and not model_cfg.qkv_bias:
      continue
    if path[-2:-1] in (("q_norm",), ("k_norm",)) and not model_cfg.qk_norm:
      continue
    yield hf, path, rule, "{i}" in hf


def read_hf_config(path: str) -> dict:
  """The model's `config.json` as a dict; a one-line FileNotFoundError when `path` is not a
  Hugging Face model directory."""
  cfg_file = os.path.join(path, "config.json")
  if not os.path.isfile(cfg_file):
    raise FileNotFoundError(
      f"{cfg_file} not found: model.path must be a Hugging Face model "
      "directory with config.json and *.safetensors"
    )
  with open(cfg_file) as f:
    return json.load(f)


def missing_files(path: str) -> str | None:
  """What a Hugging Face model directory lacks for training or evaluation (config.json,
  safetensors weights, tokenizer files), in words; None when it has all three."""
  has = lambda *names: any(os.path.isfile(os.path.join(path, n)) for n in names)
  if not has("config.json"):
    return "no config.json"
  if not has("model.safetensors", "model.safetensors.index.json"):
    bins = has("pytorch_model.bin", "pytorch_model.bin.index.json")
    return "config.json but no weights (model.safetensors or model.safetensors.index.json)" + (
      "; it holds pytorch_model.bin: save it again with save_pretrained (safetensors)"
      if bins
      else "; download the whole model (hf download REPO --local-dir DIR)"
    )
  if not has("tokenizer.json", "tokenizer_config.json"):
    return "no tokenizer.json or tokenizer_config.json; copy the model's tokenizer files there"
  return None


def _weight_files(path: str) -> list[str]:
  index = os.path.join(path, "model.safetensors.index.json")
  if os.path.isfile(index):
    with open(index) as f:
      files = sorted(set(json.load(f)["weight_map"].values()))
    return [os.path.join(path, x) for x in files]
  single = os.path.join(path, "model.safetensors")
  if os.path.isfile(single):
    return [single]
  raise FileNotFoundError(
    f"no model.safetensors or model.safetensors.index.json in {path}; "
    "save the model with safetensors (save_pretrained does by default)"
  )


def read_tensors(path: str) -> dict[str, np.ndarray]:
  """All tensors of a HF directory as numpy (bf16 via ml_dtypes), single file or sharded."""
  out = {}
  for f in _weight_files(path):
    with safetensors.safe_open(f, framework="numpy") as st:
      for name in st.keys():
        out[name] = st.get_tensor(name)
  return out


def hf_to_params(model_cfg: ModelConfig, tensors: dict[str, np.ndarray], dtype) -> dict:
  """HF tensors -> nested param dict (numpy, `dtype`); missing or unused tensors are errors."""
  params: dict = {}
  used = set()
  for hf, path, rule, per_layer in _rows(model_cfg):
    to_ours = _RULES[rule][0]
    if per_layer:
      names = [hf.format(i=i) for i in range(model_cfg.num_layers)]
      missing = [n for n in names if n not in tensors]
      if missing:
        raise KeyError(f"checkpoint lacks {missing[0]} (and {len(missing) - 1} more)")
      arr = np.stack([to_ours(np.asarray(tensors[n]), model_cfg) for n in names])
      used.update(names)
    else:
      if hf not in tensors:
        raise KeyError(f"checkpoint lacks {hf}")
      arr = to_ours(np.asarray(tensors[hf]), model_cfg)
      used.add(hf)
    node = params
    for key in path[:-1]:
      node = node.setdefault(key, {})
    node[path[-1]] = np.ascontiguousarray(arr.astype(dtype))
  extra = [n for n in tensors if n not in used and not re.search(r"rotary_emb", n)]
  if model_cfg.tie_word_embeddings:
    extra = [n for n in extra if n != "lm_head.weight"]
  if extra:
    raise KeyError(
      f"checkpoint has tensors this {model_cfg.family} model does not use, e.g. {extra[0]}; "
      "does its config.json name its architecture?"
    )
  return params


def params_to_hf(model_cfg: ModelConfig, params, dtype=None) -> dict[str, np.ndarray]:
  """Nested params -> {HF name: numpy array} (host copies)."""
  out = {}
  for hf, path, rule, per_layer in _rows(model_cfg):
    to_hf = _RULES[rule][1]
    node = params
    for key in path:
      node = node[key]
    arr = np.asarray(node)
    if dtype is not None:
      arr = arr.astype(dtype)
    if per_layer:
      for i in range(model_cfg.num_layers):
        out[hf.format(i=i)] = np.ascontiguousarray(to_hf(arr[i], model_cfg))
    else:
      out[hf] = np.ascontiguousarray(to_hf(arr, model_cfg))
  return out


def _umask() -> int:
  """The process's umask, read without setting it (os.umask would, for every thread)."""
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith("Umask:"):
          return int(line.split()[1], 8)
  except OSError:
    pass
  return 0o022


def write_hf_dir(
  model_cfg: ModelConfig,
  tensors: dict[str, np.ndarray],
  path: str,
  tokenizer_dir: str | None = None,
  max_shard_bytes: int = 0,
) -> list[str]:
  """Writes safetensors (+ index when sharded), config.json and tokenizer files; returns names."""
  os.makedirs(path, exist_ok=True)
  names = list(tensors)
  shards, cur, size = [], [], 0
  for n in names:
    nbytes = tensors[n].nbytes
    if cur and max_shard_bytes and size + nbytes > max_shard_bytes:
      shards.append(cur)
      cur, size = [], 0
    cur.append(n)
    size += nbytes
  shards.append(cur)
  written = []
  meta = {"format": "pt"}
  if len(shards) == 1:
    safetensors.numpy.save_file(
      {n: tensors[n] for n in shards[0]}, os.path.join(path, "model.safetensors"), metadata=meta
    )
    written.append("model.safetensors")
  else:
    weight_map = {}
    for k, shard in enumerate(shards):
      fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
      safetensors.numpy.save_file(
        {n: tensors[n] for n in shard}, os.path.join(path, fname), metadata=meta
      )
      weight_map.update({n: fname for n in shard})
      written.append(fname)
    total = sum(t.nbytes for t in tensors.values())
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
      json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    written.append("model.safetensors.index.json")
  umask = _umask()
  for name in written:  # safetensors writes 0600; a model directory is read by others too
    if name.endswith(".safetensors"):
      os.chmod(os.path.join(path, name), 0o666 & ~umask)
  hf_cfg = model_cfg.to_hf_dict()
  first = next(iter(tensors.values()))
  hf_cfg["torch_dtype"] = "bfloat16" if first.dtype.name in _BF16_NAMES else "float32"
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(hf_cfg, f, indent=1)
  written.append("config.json")
  if tokenizer_dir:
    for name in TOKENIZER_FILES:
      src = os.path.join(tokenizer_dir, name)
      if os.path.isfile(src) and os.path.abspath(src) != os.path.abspath(os.path.join(path, name)):
        shutil.copyfile(src, os.path.join(path, name))
        written.append(name)
  return written
