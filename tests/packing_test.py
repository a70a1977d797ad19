"""Packed sequences: the packer, and packed = padded for the loss, gradients and update."""

import jax
import numpy as np
import optax
import pytest

from prorl_jax.algo import losses, packing
from prorl_jax.model import init_params, presets
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
TP, TR = 8, 40  # padded prompt / response widths
B = 16


def _batch(seed=0, b=B):
  """A padded batch of mixed lengths (long-tailed responses), two empty rows at the end."""
  rng = np.random.RandomState(seed)
  t = TP + TR
  prompt = rng.randint(1, TP + 1, size=b)
  resp = np.minimum(rng.geometric(0.08, size=b), TR)
  resp[-2:] = 0
  pos = np.arange(t)[None]
  attn = ((pos >= TP - prompt[:, None]) & (pos < TP + resp[:, None])).astype(np.int32)
  attn[-2:, TP - 1] = 1
  loss_mask = ((pos >= TP) & (pos < TP + resp[:, None])).astype(np.int32)
  tokens = np.where(attn > 0, rng.randint(3, 50, size=(b, t)), 0).astype(np.int32)
  f = lambda s: (rng.randn(b, t) * s).astype(np.float32) * loss_mask  # noqa: E731
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


def test_first_fit_decreasing_by_hand():
  bins = packing.first_fit_decreasing([5, 9, 3, 7, 2, 4], 10)
  # 9, 7, 5 open three bins; 4 fits only beside 5, 3 beside 7; 2 fits nowhere (1, 0, 1 left)
  assert bins == [[1], [3, 2], [0, 5], [4]]
  with pytest.raises(packing.PackingError, match="does not fit a row of 10"):
    packing.first_fit_decreasing([11], 10)


def test_plan_round_trips_every_token_and_restarts_positions():
  b = _batch(1)
  p = packing.plan(b["attn_mask"], b["loss_mask"], length=64, rows=2)
  keep = b["loss_mask"].sum(1) > 0
  assert p.real_tokens == b["attn_mask"][keep].sum()
  for k in ("tokens", "old_logp", "adv"):
    back = packing.unpack(p, packing.pack(p, b[k]))
    np.testing.assert_array_equal(back[keep], (b[k] * b["attn_mask"])[keep])
  seg, pos = p.segment_ids, p.positions
  for s in range(p.slabs):
    for r in range(p.rows):
      ids = seg[s, r]
      assert ids[ids > 0].tolist() == sorted(ids[ids > 0].tolist())  # contiguous segments
      for i in set(ids.tolist()) - {0}:
        assert pos[s, r][ids == i].tolist() == list(range((ids == i).sum()))
  # each sequence's tokens carry its trained-token count
  lm = packing.pack(p, b["loss_mask"])
  assert np.isclose((lm / p.seq_tokens).sum(), keep.sum())
  assert p.fill_fraction > 0.5
  with pytest.raises(packing.PackingError, match="raise rollout.token_budget"):
    packing.plan(b["attn_mask"], b["loss_mask"], length=10, rows=2)


@pytest.mark.parametrize("agg", losses.AGG_MODES)
def test_aggregate_with_seq_tokens_equals_one_row_per_sequence(agg):
  rng = np.random.RandomState(0)
  b = _batch(2)
  x = rng.randn(*b["loss_mask"].shape).astype(np.float32)
  m = b["loss_mask"]
  want = losses.aggregate(x, m, agg, norm_const=48.0)
  p = packing.plan(b["attn_mask"], m, length=64, rows=1)
  got = losses.aggregate(
    packing.pack(p, x), packing.pack(p, m), agg, norm_const=48.0, seq_tokens_BxT=p.seq_tokens
  )
  np.testing.assert_allclose(float(got), float(want), rtol=1e-6)


def _padded(mesh, lc, tx, params, batch):
  state = ts.create_train_state(CFG, tx, mesh, jax.random.PRNGKey(1), params=params)
  state, m = compiled.jit_train_step(CFG, tx, lc, mesh, batch["tokens"].shape)(state, batch)
  return state, jax.device_get(m)


def _windowed(batch):
  """CFG with 8-query attention blocks that look back only as far as the batch's longest
  sequence: each block of a 64-token row sees fewer than 64 keys."""
  longest = int(batch["attn_mask"].sum(1).max())
  assert longest + 8 <= 56
  return CFG.replace(attention_chunk=8, attention_window=longest)


def _packed(mesh, lc, tx, params, batch, length, model_cfg=CFG):
  rows = mesh.shape["data"] * mesh.shape["fsdp"]
  p = packing.plan(batch["attn_mask"], batch["loss_mask"], length=length, rows=rows)
  slabs = packing.slabs(p, batch, ts.PER_TOKEN_KEYS)
  m = batch["loss_mask"]
  counts = (m.sum(), (m.sum(1) > 0).sum())
  state = ts.create_train_state(CFG, tx, mesh, jax.random.PRNGKey(1), params=params)
  step = ts.PackedTrainStep(model_cfg, tx, lc, mesh, (rows, length))
  state, metrics = step(state, slabs, counts)
  return state, jax.device_get(metrics), p


@pytest.mark.parametrize(
  "mesh_shape,agg",
  [
    # every aggregation mode once, every mesh of the train-step tests once
    ((1, 1, 1), "token-mean"),
    ((1, 1, 1), "seq-mean-token-mean"),
    ((1, 8, 1), "seq-mean-token-sum"),
    ((2, 4, 1), "seq-mean-token-sum-norm"),
    ((2, 2, 2), "token-mean"),
    ((1, 4, 2), "seq-mean-token-mean"),
  ],
)
def test_packed_step_equals_padded_step(mesh_shape, agg):
  mesh = make_mesh(*mesh_shape, devices=jax.devices()[: int(np.prod(mesh_shape))])
  lc = ts.LossConfig(
    micro_batches=2, kl_coef=0.1, logit_chunk=16, agg=agg, norm_const=40.0, entropy_coef=0.01
  )
  tx = optax.sgd(1.0)  # the update is −gradient: params compare the gradients themselves
  params = init_params(CFG, jax.random.PRNGKey(0))
  batch = _batch(3)
  s_pad, m_pad = _padded(mesh, lc, tx, params, batch)
  # The single-device meshes also run the windowed attention blocks of the trainer's packed steps.
  model_cfg = _windowed(batch) if mesh_shape == (1, 1, 1) else CFG
  s_pack, m_pack, p = _packed(mesh, lc, tx, params, batch, length=64, model_cfg=model_cfg)
  assert p.slabs > 1 or p.rows > 1  # one device: several micro-batches
  for k in ("actor/loss", "actor/pg_loss", "actor/kl_ref", "actor/entropy", "actor/clipfrac"):
    np.testing.assert_allclose(m_pack[k], m_pad[k], rtol=1e-5, atol=1e-6, err_msg=k)
  np.testing.assert_allclose(m_pack["actor/grad_norm"], m_pad["actor/grad_norm"], rtol=1e-5)
  for a, b in zip(jax.tree.leaves(s_pack.params), jax.tree.leaves(s_pad.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
  assert float(m_pad["actor/grad_norm"]) > 0


@pytest.mark.parametrize("windowed", [False, True])
def test_packed_logprobs_equal_padded_logprobs(windowed):
  mesh = make_mesh(1, 2, 1, devices=jax.devices()[:2])
  params = init_params(CFG, jax.random.PRNGKey(0))
  batch = _batch(4)
  model_cfg = _windowed(batch) if windowed else CFG
  pad_fn = compiled.jit_logprob_step(
    CFG, mesh, batch["tokens"].shape, temperature=0.7, logit_chunk=16
  )
  lp_pad, ent_pad = pad_fn(params, {k: batch[k] for k in ("tokens", "attn_mask")})
  p = packing.plan(batch["attn_mask"], batch["loss_mask"], length=64, rows=2)
  fn = compiled.jit_packed_logprob_step(model_cfg, mesh, (2, 64), temperature=0.7, logit_chunk=16)
  outs = [
    fn(params, {k: s[k] for k in ts.PACKED_MODEL_KEYS})
    for s in packing.slabs(p, batch, ("tokens",))
  ]
  lp = packing.unpack(p, np.stack([np.asarray(o[0]) for o in outs]))
  ent = packing.unpack(p, np.stack([np.asarray(o[1]) for o in outs]))
  m = batch["loss_mask"] > 0
  np.testing.assert_allclose(lp[m], np.asarray(lp_pad)[m], atol=1e-5)
  np.testing.assert_allclose(ent[m], np.asarray(ent_pad)[m], atol=1e-5)
