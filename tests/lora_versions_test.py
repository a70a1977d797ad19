"""A LoRA run's weight versions in megabytes: the base model published once on the exchange
under the content address of its files, each version its adapters and probe; a worker fetches
the base once and loads every version whole, the JAX engine merging in memory and an engine that
reads only model directories from a merged copy (`adapters.merge_into`, no JAX). Both equal the
trainer's own merge (`lora.merged`)."""

import json
import os

import jax
import numpy as np
import pytest

from prorl_jax.model import load_hf, lora, presets, save_hf
from prorl_jax.rollout import adapters
from prorl_jax.rollout.engines.jax_engine import JaxEngine
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.rollout.worker import Worker
from prorl_jax.trainer import versions

TARGETS = ("q_proj", "v_proj", "down_proj")


def _adapted(base_dir: str, rank=4, alpha=8.0, dtype="float32"):
  """(adapted config, params of the base in `dtype` with random adapters on TARGETS)."""
  model_cfg, params = load_hf(base_dir, dtype=dtype)
  adapted = model_cfg.replace(lora_rank=rank, lora_alpha=alpha, lora_targets=TARGETS)
  fresh = lora.init_adapters(adapted, jax.random.PRNGKey(1))
  rng = np.random.RandomState(0)
  fresh = jax.tree.map(lambda x: x + 0.05 * rng.standard_normal(x.shape).astype(np.float32), fresh)
  return adapted, lora.with_adapters(params, fresh)


def _publish(ex: Exchange, base_dir: str, adapted, params, version: int, tmp) -> str:
  """The base (once) and version `version`'s adapters and probe, as the trainer publishes a
  LoRA run's versions (`versions._publish_adapters`'s files)."""
  base_cfg, base = lora.without_adapters(adapted, params)
  whole = str(tmp / "base")
  if not os.path.isdir(whole):
    save_hf(base_cfg, base, whole, tokenizer_dir=base_dir, dtype="float32")
  base_id = ex.weights.publish_base(whole)
  out = str(tmp / f"publish-{version}")
  m = adapted
  config = adapters.peft_config(m.lora_rank, m.lora_alpha, m.lora_targets, "tiny")
  adapters.write_version(out, lora.to_peft(m, lora.adapters(params)), config, base_id)
  merged_cfg, merged = lora.merged(adapted, params)
  versions.write_probe(merged_cfg, merged, [[1, 2, 3, 4, 5, 6]], out)
  ex.weights.publish(version, version, out)
  return base_id


def _bytes(manifest: dict) -> int:
  return sum(f["size"] for f in manifest["files"].values())


def test_a_lora_version_is_its_adapters_and_a_worker_loads_it_whole(tmp_path, base):
  ex = Exchange(str(tmp_path / "exchange"))
  adapted, params = _adapted(base)
  base_id = _publish(ex, base, adapted, params, 1, tmp_path)
  first = ex.weights.base_manifest(base_id)
  assert _publish(ex, base, adapted, params, 2, tmp_path) == base_id
  assert ex.weights.base_manifest(base_id) == first  # the base once: not written again
  assert [k.split("/")[1] for k in ex.store.list("bases/") if k.endswith("manifest.json")] == [
    base_id
  ]
  version, whole = ex.weights.manifest(2), ex.weights.base_manifest(base_id)
  assert set(version["files"]) == {
    adapters.ADAPTER_WEIGHTS, adapters.ADAPTER_CONFIG, adapters.BASE_FILE, "probe.json"
  }  # fmt: skip
  # the adapters' float32 bytes: r x (in + out) per layer and target
  shapes = {(n, t.shape) for n, t in lora.to_peft(adapted, lora.adapters(params)).items()}
  want = 4 * sum(int(np.prod(s)) for _, s in shapes)
  got = version["files"][adapters.ADAPTER_WEIGHTS]["size"]
  assert want <= got <= want + 16_384  # and the safetensors header
  assert _bytes(version) < _bytes(whole) / 10

  engine = JaxEngine()
  worker = Worker(ex, engine, str(tmp_path / "cache"), "w0")
  assert worker.maybe_reload() and worker.version == 2
  merged_cfg, merged = lora.merged(adapted, params)
  assert engine.model_cfg == merged_cfg.replace(param_dtype="float32")
  for a, b in zip(jax.tree.leaves(engine.params), jax.tree.leaves(merged)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=0)
  assert worker.mismatch is not None and worker.mismatch["max"] < 1e-4  # the probe agrees
  assert os.path.isdir(str(tmp_path / "cache" / f"base-{base_id}"))

  # an engine that loads model directories: the merge without JAX, equal to the trainer's
  out = adapters.merge_into(
    str(tmp_path / "cache" / f"base-{base_id}"),
    str(tmp_path / "cache" / "v00000002"),
    str(tmp_path / "merged"),
  )
  assert {"config.json", "probe.json", "tokenizer.json"} <= set(os.listdir(out))
  got_cfg, got = load_hf(out, dtype="float32")
  assert got_cfg.lora_rank == 0
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(merged)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=0)


def test_the_merge_rounds_a_bfloat16_base_as_the_trainer_does(tmp_path, base):
  """A base published in bfloat16: each merged weight is the float32 sum rounded once to
  bfloat16, as `lora.merged` rounds it (equal but for a sum within an ulp of a tie)."""
  adapted, params = _adapted(base, dtype="bfloat16")
  base_cfg, plain = lora.without_adapters(adapted, params)
  save_hf(base_cfg, plain, str(tmp_path / "base"), tokenizer_dir=base, dtype="bfloat16")
  config = adapters.peft_config(4, 8.0, TARGETS, "tiny")
  tensors = lora.to_peft(adapted, lora.adapters(params))
  adapters.write_version(str(tmp_path / "v"), tensors, config, "any")
  out = adapters.merge_into(str(tmp_path / "base"), str(tmp_path / "v"), str(tmp_path / "m"))
  _, got = load_hf(out, dtype="bfloat16")
  _, want = lora.merged(adapted, params)
  diffs = [
    float(np.mean(np.asarray(a, np.float32) != np.asarray(b, np.float32)))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want))
  ]
  assert max(diffs) < 1e-3, diffs
  moved = lora.merged(adapted, params)[1]["layers"]["attn"]["q_proj"]["kernel"]
  assert np.any(np.asarray(moved) != np.asarray(plain["layers"]["attn"]["q_proj"]["kernel"]))


def test_a_base_whose_files_are_not_its_id_is_refused(tmp_path, base):
  """A base's manifest must hash to its id: one naming other files (here one file fewer, each
  left intact) is quarantined and not fetched; a version naming no base is one line."""
  ex = Exchange(str(tmp_path / "exchange"))
  base_id = ex.weights.publish_base(base)
  assert ex.weights.fetch_base(base_id, str(tmp_path / "good")) is not None
  key = f"bases/{base_id}/manifest.json"
  doc = json.loads(ex.store.read(key)[0])
  del doc["files"]["config.json"]
  ex.store.write(key, json.dumps(doc).encode())
  assert ex.weights.fetch_base(base_id, str(tmp_path / "copy")) is None
  assert not os.path.exists(tmp_path / "copy")
  (tmp_path / "v").mkdir()
  (tmp_path / "v" / adapters.BASE_FILE).write_text("{}")
  with pytest.raises(ValueError, match="names no base model"):
    adapters.base_of(str(tmp_path / "v"))


def test_the_bytes_a_version_publishes():
  """For the 1.5B preset with the recipe's rank 8 on every projection: the adapters are 9.2M
  float32 parameters, 1% of the bfloat16 whole model's bytes (rank 16: 2.1%)."""
  whole = presets.r1_distill_qwen_1p5b().num_params * 2

  def adapter_params(rank):
    c = presets.r1_distill_qwen_1p5b(lora_rank=rank, lora_targets=presets.LORA_TARGETS)
    shapes = jax.eval_shape(lambda: lora.init_adapters(c, jax.random.PRNGKey(0)))
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))

  # per layer r x (in + out): q and o 2 x 1536, k and v 1536 + 256, gate, up, down 1536 + 8960
  per_rank = 28 * (2 * 3072 + 2 * 1792 + 3 * 10496)
  assert adapter_params(8) == 8 * per_rank == 9_232_384
  assert 4 * adapter_params(8) / whole == pytest.approx(0.0104, abs=5e-4)
  assert 4 * adapter_params(16) / whole == pytest.approx(0.0208, abs=5e-4)
