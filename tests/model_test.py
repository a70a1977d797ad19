"""Qwen2 parity with transformers, HF round trips, causality, presets."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prorl_jax.model import forward, init_params, load_hf, presets, save_hf
from prorl_jax.model.presets import ModelConfig
from tests.hf_fixtures import hf_logits, make_hf_qwen2

TOL = 1e-4


@pytest.mark.parametrize(
  "tie,heads,kv,theta",
  [(True, 4, 2, 10000.0), (False, 4, 4, 10000.0), (False, 8, 2, 1_000_000.0), (True, 6, 1, 500.0)],
)
def test_logits_match_transformers(tmp_path, tie, heads, kv, theta):
  model = make_hf_qwen2(
    str(tmp_path), tie=tie, heads=heads, kv_heads=kv, rope_theta=theta, hidden=16 * heads
  )
  model_cfg, params = load_hf(str(tmp_path))
  assert model_cfg.tie_word_embeddings == tie and model_cfg.rope_theta == theta
  tokens = np.random.RandomState(0).randint(0, 97, size=(3, 11))
  ref = hf_logits(model, tokens)
  ours = np.asarray(forward(model_cfg, params, jnp.asarray(tokens)))
  assert np.abs(ref).max() > 1.0  # a meaningful scale, not near-zero logits
  np.testing.assert_allclose(ours, ref, atol=TOL, rtol=0)


def test_left_padded_batch_matches_transformers(tmp_path):
  model = make_hf_qwen2(str(tmp_path), tie=False)
  model_cfg, params = load_hf(str(tmp_path))
  rng = np.random.RandomState(1)
  tokens = rng.randint(3, 97, size=(3, 9))
  mask = np.ones_like(tokens)
  mask[1, :4] = 0
  mask[2, :7] = 0
  tokens[mask == 0] = 0
  ref = hf_logits(model, tokens, mask)
  ours = np.asarray(forward(model_cfg, params, jnp.asarray(tokens), jnp.asarray(mask)))
  valid = mask.astype(bool)
  np.testing.assert_allclose(ours[valid], ref[valid], atol=TOL, rtol=0)
  assert np.isfinite(ours).all()
  # The same row without padding gives the same logits on its real tokens.
  alone = np.asarray(forward(model_cfg, params, jnp.asarray(tokens[1:2, 4:])))
  np.testing.assert_allclose(ours[1, 4:], alone[0], atol=TOL, rtol=0)


def test_save_hf_roundtrip_through_transformers(tmp_path):
  import transformers

  model_cfg = presets.tiny(
    vocab_size=50, hidden_size=64, intermediate_size=96, num_layers=2, tie_word_embeddings=False
  )
  params = init_params(model_cfg, jax.random.PRNGKey(3))
  params = jax.tree.map(lambda x: x * 5.0, params)  # larger-scale weights
  save_hf(model_cfg, params, str(tmp_path / "m"))
  hf = transformers.AutoModelForCausalLM.from_pretrained(
    str(tmp_path / "m"), attn_implementation="eager"
  ).eval()
  tokens = np.random.RandomState(0).randint(0, 50, size=(2, 7))
  np.testing.assert_allclose(
    np.asarray(forward(model_cfg, params, jnp.asarray(tokens))),
    hf_logits(hf, tokens),
    atol=TOL,
    rtol=0,
  )
  cfg2, params2 = load_hf(str(tmp_path / "m"))
  assert cfg2.replace() == model_cfg
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(params2)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_sharded_index_loading(tmp_path):
  model = make_hf_qwen2(str(tmp_path / "one"), tie=True)
  model_cfg, params = load_hf(str(tmp_path / "one"))
  files = save_hf(model_cfg, params, str(tmp_path / "many"), max_shard_bytes=20_000)
  assert "model.safetensors.index.json" in files and len(files) > 3
  cfg2, params2 = load_hf(str(tmp_path / "many"))
  tokens = np.arange(10)[None] % 97
  np.testing.assert_allclose(
    np.asarray(forward(cfg2, params2, jnp.asarray(tokens))),
    hf_logits(model, tokens),
    atol=TOL,
    rtol=0,
  )


def test_bf16_params_save_and_load(tmp_path):
  make_hf_qwen2(str(tmp_path / "a"), tie=False)
  model_cfg, params = load_hf(str(tmp_path / "a"), dtype="bfloat16")
  assert jax.tree.leaves(params)[0].dtype == jnp.bfloat16
  save_hf(model_cfg, params, str(tmp_path / "b"))
  assert json.load(open(tmp_path / "b" / "config.json"))["torch_dtype"] == "bfloat16"
  _, p2 = load_hf(str(tmp_path / "b"), dtype="bfloat16")
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(p2)):
    np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))
  logits = forward(model_cfg, params, jnp.arange(6)[None])
  assert logits.dtype == jnp.float32 and np.isfinite(np.asarray(logits)).all()


def test_causality():
  model_cfg = presets.tiny(vocab_size=30, num_layers=2)
  params = init_params(model_cfg, jax.random.PRNGKey(0))
  tokens = jnp.asarray(np.random.RandomState(0).randint(0, 30, size=(2, 12)))
  base = np.asarray(forward(model_cfg, params, tokens))
  changed = np.asarray(forward(model_cfg, params, tokens.at[:, 8].set((tokens[:, 8] + 1) % 30)))
  np.testing.assert_array_equal(base[:, :8], changed[:, :8])
  assert np.abs(base[:, 8:] - changed[:, 8:]).max() > 1e-6


@pytest.mark.parametrize("remat", ["full", "dots"])
def test_remat_gives_same_gradients(remat):
  model_cfg = presets.tiny(vocab_size=30, num_layers=2)
  params = init_params(model_cfg, jax.random.PRNGKey(0))
  tokens = jnp.arange(16).reshape(2, 8) % 30

  def loss(c, p):
    return jnp.mean(jax.nn.log_softmax(forward(c, p, tokens))[..., 0])

  g0 = jax.grad(lambda p: loss(model_cfg, p))(params)
  g1 = jax.grad(lambda p: loss(model_cfg.replace(remat=remat), p))(params)
  for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


def test_unsupported_architecture_is_a_clear_error(tmp_path):
  os.makedirs(tmp_path, exist_ok=True)
  with open(tmp_path / "config.json", "w") as f:
    json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}, f)
  with pytest.raises(ValueError, match="unsupported architecture.*Qwen2ForCausalLM"):
    load_hf(str(tmp_path))
  with pytest.raises(FileNotFoundError, match="config.json"):
    load_hf(str(tmp_path / "missing"))
  d = presets.tiny().to_hf_dict()
  d["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}
  with pytest.raises(ValueError, match="rope_scaling"):
    ModelConfig.from_hf_dict(d)


def test_r1_distill_preset_is_the_1p5b_architecture():
  model_cfg = presets.r1_distill_qwen_1p5b()
  # DeepSeek-R1-Distill-Qwen-1.5B has 1,777,088,000 parameters (untied head).
  assert model_cfg.num_params == 1_777_088_000
  assert ModelConfig.from_hf_dict(model_cfg.to_hf_dict()) == model_cfg
