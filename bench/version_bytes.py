"""The bytes one weight version puts on the exchange, full fine-tuning against LoRA, for a preset.

  python bench/version_bytes.py [--preset deepseek-r1-distill-qwen-1.5b] [--ranks 8,16]

Writes the files the trainer publishes, through the trainer's own writers, into a temporary
directory and counts them: a full version is the whole model in the published dtype
(`save_hf`, bfloat16, sharded as `shard_bytes` shards it, with config.json; the tokenizer files
are left out of both); a LoRA version is its adapters (`adapters.write_version`: the PEFT
directory in float32 and base.json). Both carry the same probe file, left out of both. The
tensors are zeros (a file's size does not depend on its values). Prints one JSON line per case
and the ratio LoRA / full.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import jax
import ml_dtypes
import numpy as np

from prorl_jax.model import init_params, lora, presets, save_hf
from prorl_jax.rollout import adapters
from prorl_jax.rollout.weights import shard_bytes


def _zeros(tree, dtype=None):
  """numpy zeros shaped as an abstract pytree (in `dtype`, else the leaf's)."""
  return jax.tree.map(lambda x: np.zeros(x.shape, dtype or x.dtype), tree)


def _size(path: str) -> int:
  return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--preset", default="deepseek-r1-distill-qwen-1.5b")
  ap.add_argument("--ranks", default="8,16")
  a = ap.parse_args()
  model_cfg = presets.preset(a.preset)()
  shapes = jax.eval_shape(lambda: init_params(model_cfg, jax.random.PRNGKey(0)))
  with tempfile.TemporaryDirectory() as tmp:
    full_dir = os.path.join(tmp, "full")
    params = _zeros(shapes, ml_dtypes.bfloat16)
    nbytes = sum(x.nbytes for x in jax.tree.leaves(params))
    save_hf(model_cfg, params, full_dir, dtype="bfloat16", max_shard_bytes=shard_bytes(nbytes))
    full = _size(full_dir)
    del params
    print(json.dumps({"case": "full", "preset": a.preset, "bytes": full}))
    for rank in (int(r) for r in a.ranks.split(",")):
      c = model_cfg.replace(lora_rank=rank, lora_targets=presets.LORA_TARGETS)
      tree = _zeros(jax.eval_shape(lambda c=c: lora.init_adapters(c, jax.random.PRNGKey(0))))
      out = os.path.join(tmp, f"lora{rank}")
      config = adapters.peft_config(rank, 16.0, c.lora_targets, a.preset)
      adapters.write_version(out, lora.to_peft(c, tree), config, "0" * 16)
      got = _size(out)
      n = sum(x.size for x in jax.tree.leaves(tree))
      print(
        json.dumps(
          {
            "case": f"lora rank {rank}, every projection",
            "adapter_params": n,
            "bytes": got,
            "lora_over_full": round(got / full, 5),
          }
        )
      )


if __name__ == "__main__":
  main()
