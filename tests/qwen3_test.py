"""Qwen3 through the one decoder layer: logits equal to transformers' `Qwen3ForCausalLM` (a random
small config whose head_dim is not hidden / heads), Hugging Face round trips, both JAX decoders
(the static sampler, the paged engine with XLA and Pallas attention) against the full forward,
gradients into the q/k norms, the presets against transformers' own parameter counts, and the RL
loop on a Qwen3 directory."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prorl_jax.model import forward, init_params, load_hf, presets, save_hf
from prorl_jax.model.presets import ModelConfig
from prorl_jax.records import SamplingParams
from prorl_jax.rollout.engines import jax_sampler
from prorl_jax.rollout.engines.paged import PagedConfig, PagedEngine
from tests.hf_fixtures import hf_logits, make_hf_qwen2
from tests.loop_helpers import finish, last_weights, metrics, start

TOL = 1e-4


def _qwen3(path, **kw):
  return make_hf_qwen2(str(path), family="qwen3", head_dim=32, **kw)


@pytest.mark.parametrize("tie,heads,kv", [(True, 4, 2), (False, 4, 4), (False, 8, 2)])
def test_logits_match_transformers_qwen3(tmp_path, tie, heads, kv):
  model = _qwen3(tmp_path, tie=tie, heads=heads, kv_heads=kv, hidden=64, rope_theta=1e6)
  model_cfg, params = load_hf(str(tmp_path))
  assert model_cfg.family == "qwen3" and model_cfg.head_dim == 32 != 64 // heads
  assert "bias" not in params["layers"]["attn"]["q_proj"]
  assert params["layers"]["attn"]["q_norm"]["scale"].shape == (2, 32)
  tokens = np.random.RandomState(0).randint(0, 97, size=(3, 11))
  ref = hf_logits(model, tokens)
  ours = np.asarray(forward(model_cfg, params, jnp.asarray(tokens)))
  assert np.abs(ref).max() > 1.0
  np.testing.assert_allclose(ours, ref, atol=TOL, rtol=0)
  # the q/k norms are in the math: without them the logits are not transformers'
  no_norm = jax.tree.map(lambda x: x, params)
  for name in ("q_norm", "k_norm"):
    no_norm["layers"]["attn"][name]["scale"] = jnp.ones_like(
      params["layers"]["attn"][name]["scale"]
    )
  assert np.abs(np.asarray(forward(model_cfg, no_norm, jnp.asarray(tokens))) - ref).max() > 1e-2


def test_left_padded_batch_matches_transformers_qwen3(tmp_path):
  model = _qwen3(tmp_path)
  model_cfg, params = load_hf(str(tmp_path))
  tokens = np.random.RandomState(1).randint(3, 97, size=(3, 9))
  mask = np.ones_like(tokens)
  mask[1, :4] = 0
  tokens[mask == 0] = 0
  ref = hf_logits(model, tokens, mask)
  ours = np.asarray(forward(model_cfg, params, jnp.asarray(tokens), jnp.asarray(mask)))
  np.testing.assert_allclose(ours[mask == 1], ref[mask == 1], atol=TOL, rtol=0)


def test_save_hf_roundtrip_through_transformers_qwen3(tmp_path):
  import transformers

  model_cfg = presets.tiny(vocab_size=50, hidden_size=64, num_layers=2, head_dim=32)
  model_cfg = model_cfg.replace(family="qwen3", tie_word_embeddings=False)
  params = init_params(model_cfg, jax.random.PRNGKey(3))
  params = jax.tree.map(lambda x: x * 5.0, params)
  save_hf(model_cfg, params, str(tmp_path / "m"))
  written = json.load(open(tmp_path / "m" / "config.json"))
  assert written["architectures"] == ["Qwen3ForCausalLM"] and written["model_type"] == "qwen3"
  hf = transformers.AutoModelForCausalLM.from_pretrained(
    str(tmp_path / "m"), attn_implementation="eager"
  ).eval()
  assert type(hf).__name__ == "Qwen3ForCausalLM"
  tokens = np.random.RandomState(0).randint(0, 50, size=(2, 7))
  ours = np.asarray(forward(model_cfg, params, jnp.asarray(tokens)))
  np.testing.assert_allclose(ours, hf_logits(hf, tokens), atol=TOL, rtol=0)
  cfg2, params2 = load_hf(str(tmp_path / "m"))
  assert cfg2 == model_cfg
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(params2)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


CFG = presets.tiny(vocab_size=40, num_layers=2, head_dim=16, family="qwen3")
PROMPTS = [[1, 5, 6, 7], [1, 9], [1, 3, 3, 3, 3, 3, 3], [2]]


@pytest.fixture(scope="module")
def params():
  p = init_params(CFG, jax.random.PRNGKey(0))
  p = jax.tree.map(lambda x: x * 3.0, p)  # peaked enough that greedy paths differ
  # norms away from one, so a decoder that skipped them would differ
  for name in ("q_norm", "k_norm"):
    scale = p["layers"]["attn"][name]["scale"]
    p["layers"]["attn"][name]["scale"] = 1.0 + 0.5 * jax.random.normal(
      jax.random.PRNGKey(len(name)), scale.shape
    )
  return p


def test_the_decoders_follow_the_full_forward_qwen3(params):
  sp = SamplingParams(max_new_tokens=8, temperature=0.7)
  out = jax_sampler.generate(CFG, params, PROMPTS, sp, seed=3)
  for i, prompt in enumerate(PROMPTS):
    seq = list(prompt)
    for t in range(8):
      logits = np.asarray(forward(CFG, params, jnp.asarray([seq]))[0, -1])
      tok = int(out.tokens[i, t])
      assert abs(float(jax.nn.log_softmax(logits / 0.7)[tok]) - float(out.logprobs[i, t])) < 1e-5
      seq.append(tok)
  rows = [p for p in PROMPTS for _ in range(2)]
  want = jax_sampler.generate(CFG, params, rows, sp, seed=5)
  for attention in ("xla", "pallas_interpret"):
    pc = PagedConfig(slots=3, page_size=4, steps_per_sync=3, attention=attention)
    got = PagedEngine(CFG, params, pc).generate(PROMPTS, 2, sp, seed=5)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_allclose(got.logprobs, want.logprobs, atol=2e-5)


def test_gradients_reach_the_qk_norms(params):
  tokens = jnp.asarray([[1, 5, 6, 7, 9, 2]])
  g = jax.grad(lambda p: jnp.sum(jax.nn.log_softmax(forward(CFG, p, tokens))[0, :, 3]))(params)
  for name in ("q_norm", "k_norm"):
    assert np.abs(np.asarray(g["layers"]["attn"][name]["scale"])).max() > 1e-4


@pytest.mark.parametrize(
  "name, hub", [("qwen3-1.7b", "1.7B"), ("qwen3-4b", "4B"), ("qwen3-8b", "8B")]
)
def test_qwen3_presets_have_transformers_parameter_counts(name, hub):
  import torch
  import transformers

  model_cfg = presets.preset(f"Qwen/Qwen3-{hub}")
  assert model_cfg is presets.PRESETS[name] or model_cfg == presets.PRESETS[name]()
  model_cfg = presets.PRESETS[name]()
  hf_cfg = transformers.Qwen3Config(
    **{k: v for k, v in model_cfg.to_hf_dict().items() if k not in ("architectures", "torch_dtype")}
  )
  with torch.device("meta"):
    model = transformers.Qwen3ForCausalLM(hf_cfg)
  total = sum(p.numel() for p in model.parameters())  # a tied head is counted once
  assert model_cfg.num_params == total
  assert ModelConfig.from_hf_dict(model_cfg.to_hf_dict()) == model_cfg


def test_the_rl_loop_trains_a_qwen3_model(tmp_path, base):
  """Two RL steps on a Qwen3 directory (the demo's tokenizer, a random Qwen3 model of the demo's
  sizes), with a JAX worker decoding by continuous batching: the run samples, scores, updates
  (every group kept: the length penalty alone gives a random model's samples advantages) and
  publishes Qwen3 weights whose q/k norms the updates moved."""
  model_cfg, _ = load_hf(base)
  q3 = model_cfg.replace(family="qwen3")
  save_hf(q3, init_params(q3, jax.random.PRNGKey(0)), str(tmp_path / "q3"), tokenizer_dir=base)
  run_dir = str(tmp_path / "run")
  extra = {"jax_engine.batching": "continuous", "algo.dynamic_sampling": False}
  finish(start(run_dir, str(tmp_path / "q3"), 2, **extra))
  assert [r["step"] for r in metrics(run_dir)] == [1, 2]
  version, weights = last_weights(run_dir)
  assert version == "v00000002"
  published = json.load(open(tmp_path / "run" / "exchange" / "weights" / version / "config.json"))
  assert published["architectures"] == ["Qwen3ForCausalLM"]
  norm = weights["model.layers.0.self_attn.q_norm.weight"]
  assert np.abs(norm - 1.0).max() > 0  # initialised to ones, moved by the updates
  assert np.ptp(norm) > 0  # by its gradients: weight decay alone moves every entry alike
