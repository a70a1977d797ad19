"""LoRA adapters against peft's, on small Qwen2 and Qwen3 models built by transformers (the
independent reference): the adapted forward equals peft's, merged equals unmerged, a fresh
adapter is the base model, gradients reach only the adapters, and peft's tensors round-trip."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prorl_jax.model import forward, load_hf, lora
from prorl_jax.model.presets import LORA_TARGETS
from tests.hf_fixtures import hf_logits, make_hf_qwen2

TOL = 1e-4


def _peft(model, rank, alpha, targets, seed):
  """The transformers model under a peft LoRA adapter with random A and B (B is zero at peft's
  start: random here so the adapter does something)."""
  import peft
  import torch

  cfg = peft.LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(targets), lora_dropout=0.0)
  wrapped = peft.get_peft_model(model, cfg).eval()
  gen = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in wrapped.named_parameters():
      if "lora_" in name:
        p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
  return wrapped


@pytest.mark.parametrize(
  "family,targets",
  [("qwen2", LORA_TARGETS), ("qwen3", ("q_proj", "v_proj", "o_proj", "down_proj"))],
)
def test_the_adapted_forward_is_peft_s(tmp_path, family, targets):
  rank, alpha = 4, 8.0
  model = make_hf_qwen2(str(tmp_path), family=family, heads=4, kv_heads=2, hidden=64)
  base_cfg, base = load_hf(str(tmp_path))
  tokens = np.random.RandomState(0).randint(0, 97, size=(2, 9))
  base_logits = hf_logits(model, tokens)
  wrapped = _peft(model, rank, alpha, targets, seed=1)
  want = hf_logits(wrapped, tokens)
  assert np.abs(want - base_logits).max() > 0.1  # the adapter changes the model
  c = base_cfg.replace(lora_rank=rank, lora_alpha=alpha, lora_targets=tuple(targets))
  tensors = {k: v.detach().numpy() for k, v in wrapped.state_dict().items() if "lora_" in k}
  params = lora.with_adapters(base, lora.from_peft(c, tensors))
  got = np.asarray(forward(c, params, jnp.asarray(tokens)))
  np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
  # merged (what an engine or an export loads) equals unmerged
  merged_cfg, merged = lora.merged(c, params)
  assert merged_cfg.lora_rank == 0 and not lora.adapters(merged)
  np.testing.assert_allclose(
    np.asarray(forward(merged_cfg, merged, jnp.asarray(tokens))), want, atol=TOL, rtol=0
  )
  # and peft's tensors come back out as peft names and lays them out
  back = lora.to_peft(c, params)
  saved = {k.replace(".default.weight", ".weight"): v for k, v in tensors.items()}
  assert set(back) == set(saved)
  for k, v in back.items():
    np.testing.assert_array_equal(v, saved[k])


def test_fresh_adapters_are_the_base_and_only_they_learn(tmp_path):
  model = make_hf_qwen2(str(tmp_path), family="qwen2")
  base_cfg, base = load_hf(str(tmp_path))
  c = base_cfg.replace(lora_rank=2, lora_alpha=4.0, lora_targets=("q_proj", "o_proj", "up_proj"))
  fresh = lora.init_adapters(c, jax.random.PRNGKey(0))
  a = fresh["layers"]["attn"]["o_proj"]["lora_a"]
  assert a.shape == (c.num_layers, c.num_heads, c.head_dim, 2)  # o_proj: two input dims
  bound = (c.num_heads * c.head_dim) ** -0.5  # peft's Kaiming-uniform: ±1/sqrt(fan_in)
  assert 0.8 * bound < float(jnp.abs(a).max()) <= bound
  assert not np.any(np.asarray(fresh["layers"]["attn"]["o_proj"]["lora_b"]))
  params = lora.with_adapters(base, fresh)
  tokens = np.random.RandomState(2).randint(0, 97, size=(2, 7))
  np.testing.assert_allclose(
    np.asarray(forward(c, params, jnp.asarray(tokens))), hf_logits(model, tokens), atol=TOL
  )
  mask = lora.trainable_mask(params)
  assert sum(jax.tree.leaves(mask)) == 6  # A and B of three targets

  def loss(p):
    return jnp.mean(forward(c, p, jnp.asarray(tokens))[..., 3])

  grads = jax.grad(loss)(params)
  flat = jax.tree_util.tree_flatten_with_path(grads)[0]
  for path, g in flat:
    if lora.is_adapter(path) and path[-1].key == "lora_b":
      assert float(jnp.abs(g).max()) > 0, path  # B gets a gradient at step 0 (A is random)
  # the optimizer sees only the adapters: the base is not updated and has no Adam moments
  import optax

  tx = lora.adapters_only(optax.adam(0.1))
  state = tx.init(params)
  moments = sum(x.size for x in jax.tree.leaves(state) if hasattr(x, "size") and x.ndim)
  adapter_size = sum(x.size for x in jax.tree.leaves(lora.adapters(params)))
  assert moments == 2 * adapter_size
  upd, _ = tx.update(grads, state, params)
  new = optax.apply_updates(params, upd)
  for (path, old), nw in zip(jax.tree_util.tree_flatten_with_path(params)[0], jax.tree.leaves(new)):
    changed = not np.array_equal(np.asarray(old), np.asarray(nw))
    # at step 0 only B moves: A's gradient goes through B, zero until B is not
    assert changed == (lora.is_adapter(path) and path[-1].key == "lora_b"), path


def test_a_bad_adapter_setting_is_refused():
  from prorl_jax.model import presets

  with pytest.raises(ValueError, match="not among"):
    presets.tiny(lora_rank=2, lora_targets=("qkv",))
  with pytest.raises(ValueError, match="needs a rank"):
    presets.tiny(lora_rank=2)


def _lora_state(rank=2):
  from prorl_jax.model import init_params, presets
  from prorl_jax.trainer import train_step as ts

  c = presets.tiny(lora_rank=rank, lora_alpha=4.0, lora_targets=("q_proj", "down_proj"))
  params = init_params(c, jax.random.PRNGKey(0))
  tx = lora.adapters_only(ts.make_optimizer(1e-2))
  return c, tx, ts._new_state(params, tx)


def test_the_reference_is_the_base_with_the_references_adapters():
  """No second copy of the base: the reference holds only adapters; its log-probs are the
  base model's until the first reset, the snapshot's after it."""
  from prorl_jax.model import log_probs
  from prorl_jax.trainer import train_step as ts

  c, tx, state = _lora_state()
  ref_leaves = jax.tree.leaves(state.ref_params)
  assert len(ref_leaves) == 4 and all(x.dtype == jnp.float32 for x in ref_leaves)
  assert sum(x.size for x in ref_leaves) < sum(x.size for x in jax.tree.leaves(state.params)) / 10
  tokens = jnp.asarray(np.random.RandomState(0).randint(0, 32, (2, 8)))
  base_cfg, base = lora.merged(c, state.params)
  base_lp = np.asarray(log_probs(base_cfg, base, tokens))  # B = 0: the adapters add nothing

  def ref_lp(s):
    return np.asarray(log_probs(c, lora.reference_params(s.params, s.ref_params), tokens))

  np.testing.assert_allclose(ref_lp(state), base_lp, atol=1e-6)
  # the policy moves (its B no longer zero); the reference does not
  moved = jax.tree_util.tree_map_with_path(
    lambda p, x: x + 0.5 if lora.is_adapter(p) and p[-1].key == "lora_b" else x, state.params
  )
  state = state.replace(params=moved)
  policy_lp = np.asarray(log_probs(c, moved, tokens))
  assert np.abs(policy_lp - base_lp).max() > 1e-3
  np.testing.assert_allclose(ref_lp(state), base_lp, atol=1e-6)
  # a reset makes the snapshot the reference
  state = ts.reset_reference(state, tx)
  np.testing.assert_allclose(ref_lp(state), policy_lp, atol=1e-6)


def test_the_optimizer_state_is_the_adapters_only():
  from prorl_jax.trainer import train_step as ts

  c, tx, state = _lora_state()
  moments = [x for x in jax.tree.leaves(state.opt_state) if x.ndim]
  adapters = jax.tree.leaves(lora.adapters(state.params))
  assert sum(x.size for x in moments) == 2 * sum(x.size for x in adapters)  # Adam's m and v
  full = ts._new_state(lora.merged(c, state.params)[1], ts.make_optimizer(1e-2))
  assert sum(x.size for x in jax.tree.leaves(full.opt_state)) > 20 * sum(x.size for x in moments)


@pytest.mark.parametrize(
  "key,value,says",
  [
    ("lora.targets", "q_proj,qkv", "lora.targets qkv are not among q_proj"),
    ("lora.targets", " , ", "lora.targets is empty"),
    ("lora.dropout", 0.1, "lora.dropout must be 0"),
    ("lora.rank", -1, "lora.rank"),
  ],
)
def test_a_bad_lora_setting_is_one_line(key, value, says):
  """The config's checks, then the Plan's (the one that knows the model's projections), both
  before anything loads."""
  from prorl_jax import config as config_lib
  from prorl_jax.trainer.plan import Plan

  cfg = config_lib.base_config()
  cfg.lora.rank = 4
  section, leaf = key.split(".")
  cfg[section][leaf] = value
  with pytest.raises(config_lib.ConfigError, match=says):
    config_lib.validate(cfg)
    Plan.from_config(cfg)


def test_the_default_targets_are_every_projection():
  from prorl_jax import config as config_lib

  assert tuple(config_lib.items(config_lib.base_config().lora.targets)) == LORA_TARGETS


def test_a_lora_run_exports_merged_and_as_a_peft_adapter(tmp_path, base):
  """One step of a LoRA run on the tiny base, then `prorl-export` both ways: transformers with
  peft's adapter loaded from the exported directory computes the logits of the merged export,
  and the adapter has moved off zero (the run trained it)."""
  import json
  import os

  import torch
  import transformers
  from peft import PeftModel

  from prorl_jax.evaluation.export import export
  from prorl_jax.rollout import adapters
  from prorl_jax.rollout.exchange import Exchange
  from tests import loop_helpers as lh

  run = str(tmp_path / "run")
  out = lh.finish(lh.start(run, base, 1, **{"lora.rank": 4, "optim.lr": 1e-3}))
  # its worker process got each version as adapters over the base, published once
  ex = Exchange(os.path.join(run, "exchange"))
  bases = {k.split("/")[1] for k in ex.store.list("bases/")}
  assert len(bases) == 1 and ex.weights.versions(), out[-2000:]
  for v in ex.weights.versions():
    files = ex.weights.manifest(v)["files"]
    assert adapters.ADAPTER_WEIGHTS in files and "model.safetensors" not in files, files
  probed = [r["mismatch/probe_max"] for r in lh.metrics(run) if "mismatch/probe_max" in r]
  assert probed and max(probed) < 1e-3, probed  # the worker's merge is the trainer's policy
  merged_dir, adapter_dir = str(tmp_path / "merged"), str(tmp_path / "adapter")
  export(run, merged_dir, dtype="float32")
  export(run, adapter_dir, adapter=True)
  config = json.load(open(os.path.join(adapter_dir, "adapter_config.json")))
  assert config["r"] == 4 and set(config["target_modules"]) == set(LORA_TARGETS)
  merged = transformers.AutoModelForCausalLM.from_pretrained(merged_dir).eval()
  vocab = merged.config.vocab_size
  tokens = torch.tensor(np.random.RandomState(0).randint(0, vocab, (2, 9)))
  with torch.no_grad():
    plain = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    base_logits = plain(tokens).logits.numpy()
    adapted = PeftModel.from_pretrained(plain, adapter_dir).eval()
    want = merged(tokens).logits.numpy()
    got = adapted(tokens).logits.numpy()
  np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
  assert np.abs(want - base_logits).max() > 1e-6  # the adapter is not the base's zero
