"""The sharded train step on 8 fake CPU devices (set in conftest before jax is imported)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from prorl_jax.model import forward, init_params, presets
from prorl_jax.parallel.sharding import make_mesh
from prorl_jax.trainer import compiled
from prorl_jax.trainer import train_step as ts

CFG = presets.tiny(
  vocab_size=50,
  hidden_size=64,
  intermediate_size=128,
  num_layers=2,
  num_heads=4,
  num_kv_heads=2,
  head_dim=16,
  tie_word_embeddings=False,
)
B, T = 8, 12


def _batch(seed=0):
  rng = np.random.RandomState(seed)
  tokens = rng.randint(3, 50, size=(B, T)).astype(np.int32)
  prompt = rng.randint(1, 5, size=B)  # real prompt tokens, left-padded to 5
  resp = rng.randint(1, T - 5 + 1, size=B)
  pos = np.arange(T)[None]
  attn = ((pos >= 5 - prompt[:, None]) & (pos < 5 + resp[:, None])).astype(np.int32)
  loss_mask = ((pos >= 5) & (pos < 5 + resp[:, None])).astype(np.int32)
  tokens = np.where(attn > 0, tokens, 0)
  f = lambda s: (rng.randn(B, T) * s).astype(np.float32) * loss_mask  # noqa: E731
  old = f(0.3) - 3.5
  return {
    "tokens": tokens,
    "attn_mask": attn,
    "loss_mask": loss_mask,
    "old_logp": old,
    "ref_logp": old + f(0.2),
    "gen_logp": old + f(0.1),
    "adv": f(1.0),
  }


def _run(mesh_shape, micro=1, tx=None, lc=None, batch=None, steps=1):
  devices = jax.devices()[: int(np.prod(mesh_shape))]
  mesh = make_mesh(*mesh_shape, devices=devices)
  tx = tx or optax.sgd(1.0)
  lc = lc or ts.LossConfig(micro_batches=micro, kl_coef=0.1, logit_chunk=5)
  params = init_params(CFG, jax.random.PRNGKey(0))
  state = ts.create_train_state(CFG, tx, mesh, jax.random.PRNGKey(1), params=params)
  step = compiled.jit_train_step(CFG, tx, lc, mesh, (B, T))
  batch = batch or _batch()
  for _ in range(steps):
    state, metrics = step(state, batch)
  delta = jax.tree.map(lambda a, b: np.asarray(a) - np.asarray(b), state.params, params)
  return state, jax.device_get(metrics), delta


@pytest.fixture(scope="module")
def single():
  return _run((1, 1, 1))


@pytest.mark.parametrize("mesh_shape", [(1, 8, 1), (2, 4, 1), (2, 2, 2), (1, 4, 2)])
def test_sharded_step_equals_single_device(single, mesh_shape):
  assert jax.device_count() == 8
  _, m1, d1 = single
  state, m, d = _run(mesh_shape)
  np.testing.assert_allclose(m["actor/loss"], m1["actor/loss"], rtol=1e-5)
  np.testing.assert_allclose(m["actor/grad_norm"], m1["actor/grad_norm"], rtol=1e-4)
  for a, b in zip(jax.tree.leaves(d), jax.tree.leaves(d1)):  # sgd(1): delta = −grad
    np.testing.assert_allclose(a, b, atol=2e-6, rtol=1e-4)
  assert np.abs(jax.tree.leaves(d1)[0]).max() > 0
  emb = state.params["embed"]["embedding"]
  assert emb.sharding.spec == jax.sharding.PartitionSpec("tensor", "fsdp") or (
    mesh_shape[2] == 1 and emb.sharding.spec[1] == "fsdp"
  )


@pytest.mark.parametrize("micro", [2, 4])
def test_micro_batches_give_the_same_update(single, micro):
  _, m1, d1 = single
  _, m, d = _run((1, 1, 1), micro=micro)
  np.testing.assert_allclose(m["actor/loss"], m1["actor/loss"], rtol=1e-5)
  np.testing.assert_allclose(m["actor/clipfrac"], m1["actor/clipfrac"], rtol=1e-5)
  np.testing.assert_allclose(m["is/raw_max"], m1["is/raw_max"], rtol=1e-6)
  for a, b in zip(jax.tree.leaves(d), jax.tree.leaves(d1)):
    np.testing.assert_allclose(a, b, atol=2e-6, rtol=1e-4)


def test_adamw_chain_updates_and_counts_steps():
  tx = ts.make_optimizer(1e-3, weight_decay=0.01, grad_clip=1.0)
  state, m, d = _run((1, 8, 1), tx=tx, steps=2)
  assert int(state.step) == 2 and int(state.skipped) == 0
  # Adam's first steps move each weight by about lr.
  assert 0.5e-3 < np.abs(d["layers"]["mlp"]["up_proj"]["kernel"]).max() < 3e-3


def test_logprob_step_equals_log_softmax_of_forward():
  mesh = make_mesh(2, 2, 2)
  params = init_params(CFG, jax.random.PRNGKey(0))
  batch = _batch()
  fn = compiled.jit_logprob_step(CFG, mesh, (B, T), temperature=0.7, micro_batches=2, logit_chunk=4)
  lp, ent = fn(params, {"tokens": batch["tokens"], "attn_mask": batch["attn_mask"]})
  logits = forward(CFG, params, jnp.asarray(batch["tokens"]), jnp.asarray(batch["attn_mask"]))
  lsm = jax.nn.log_softmax(logits / 0.7, axis=-1)
  ref = np.take_along_axis(np.asarray(lsm[:, :-1]), batch["tokens"][:, 1:, None], -1)[..., 0]
  valid = batch["attn_mask"][:, 1:] > 0
  np.testing.assert_allclose(np.asarray(lp)[:, 1:][valid], ref[valid], atol=2e-5)
  ref_ent = -np.sum(np.exp(lsm) * lsm, -1)[:, :-1]
  np.testing.assert_allclose(np.asarray(ent)[:, 1:][valid], np.asarray(ref_ent)[valid], atol=5e-5)


def test_non_finite_step_is_skipped_and_counted():
  batch = _batch()
  batch["adv"] = batch["adv"].copy()
  batch["adv"][0, 6] = np.nan
  batch["loss_mask"][0, 6] = 1
  state, m, d = _run((1, 8, 1), tx=ts.make_optimizer(1e-3), batch=batch)
  assert m["actor/skipped"] == 1.0 and int(state.skipped) == 1 and int(state.step) == 0
  for leaf in jax.tree.leaves(d):
    assert (leaf == 0).all()
  assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(state.opt_state))


@pytest.mark.parametrize("reinit", [False, True])
def test_reference_reset(reinit):
  tx = ts.make_optimizer(1e-3)
  state, _, _ = _run((1, 8, 1), tx=tx, steps=2)
  mesh = make_mesh(1, 8, 1)
  before_mu = np.asarray(state.opt_state[1][0].mu["embed"]["embedding"])
  params = jax.device_get(state.params)
  assert (
    np.abs(np.asarray(state.ref_params["embed"]["embedding"]) - params["embed"]["embedding"]).max()
    > 0
  )
  offered = state.params  # what an inline engine generates with (the trainer's own arrays)
  state = compiled.jit_reset_reference(CFG, tx, mesh, reinit)(state)
  # the reset donates the old state but its params: the engine's arrays stay valid
  assert not any(x.is_deleted() for x in jax.tree.leaves(offered))
  for a, b in zip(jax.tree.leaves(offered), jax.tree.leaves(params)):
    np.testing.assert_array_equal(np.asarray(a), b)
  for a, b in zip(jax.tree.leaves(state.ref_params), jax.tree.leaves(params)):
    np.testing.assert_array_equal(np.asarray(a), b)
  mu = np.asarray(state.opt_state[1][0].mu["embed"]["embedding"])
  if reinit:
    assert (mu == 0).all() and int(state.opt_state[1][0].count) == 0
  else:
    np.testing.assert_array_equal(mu, before_mu)
  # Right after a reset, old and reference log-probs (same jitted function) are identical, and
  # the in-loss KL differs from 0 only by the train path's float rounding.
  lc = ts.LossConfig(kl_coef=0.1, logit_chunk=5)
  batch = _batch()
  logprobs = compiled.jit_logprob_step(CFG, mesh, (B, T), temperature=1.0)
  inputs = {"tokens": batch["tokens"], "attn_mask": batch["attn_mask"]}
  ref_lp, old_lp = logprobs(state.ref_params, inputs)[0], logprobs(state.params, inputs)[0]
  np.testing.assert_array_equal(np.asarray(ref_lp), np.asarray(old_lp))
  batch["ref_logp"] = np.asarray(ref_lp) * batch["loss_mask"]
  _, m = compiled.jit_train_step(CFG, tx, lc, mesh, (B, T))(state, batch)
  assert abs(float(m["actor/kl_ref"])) < 1e-10


def test_make_mesh_errors():
  with pytest.raises(ValueError, match="must equal the device count 8"):
    make_mesh(2, 3, 1)
  with pytest.raises(ValueError, match="does not divide the 8 devices"):
    make_mesh(3, -1, 1)
  assert make_mesh(2, -1, 2).shape == {"data": 2, "fsdp": 2, "tensor": 2}


def test_sharding_says_what_it_does(caplog):
  from prorl_jax.model import param_shardings
  from prorl_jax.parallel import sharding

  with pytest.raises(ValueError, match="'act_vocab' maps to mesh axis 'tensor', which an earlier"):
    sharding.logical_to_spec(("act_heads", "act_vocab"))
  mesh = make_mesh(1, 8, 1)
  with pytest.raises(ValueError, match="a batch of 12 rows cannot be split over .* = 8 devices"):
    compiled.batch_shardings(mesh, (12, 16))
  with pytest.raises(ValueError, match="a batch of 4 rows cannot be split"):
    ts.split_micro(jnp.zeros((8, 4)), 2, mesh)
  # 2 kv heads on tensor=4: those dims stay whole, said once in the log per parameter
  model_cfg = presets.tiny(
    vocab_size=64, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
    num_kv_heads=2, head_dim=16,
  )  # fmt: skip
  mesh = make_mesh(1, 2, 4)
  with caplog.at_level("INFO", logger="prorl_jax.parallel.sharding"):
    sh = param_shardings(model_cfg, mesh)
    param_shardings(model_cfg, mesh)
  k_spec = sh["layers"]["attn"]["k_proj"]["kernel"].spec
  assert "tensor" not in jax.tree.leaves(tuple(k_spec))
  lines = [r.getMessage() for r in caplog.records if "k_proj/kernel" in r.getMessage()]
  assert lines == [
    "param layers/attn/k_proj/kernel: dimension 2 of size 2 is not divisible by mesh axes "
    "tensor (4); kept whole"
  ]
