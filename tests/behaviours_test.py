"""Behaviours of the loop checked by hand: the train-batch layout, the KL-spike and
validation-stall resets, the probe-mismatch stop, reward-side KL, epochs, the entropy bonus,
sampler top-k and the attention-implementation choice."""

import json
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prorl_jax import config as config_lib
from prorl_jax.algo import losses
from prorl_jax.model import init_params, presets
from prorl_jax.records import Result, SamplingParams
from prorl_jax.rollout import probe
from prorl_jax.rollout.engines.jax_sampler import generate
from prorl_jax.rollout.local import WorkerFailure
from prorl_jax.trainer import batch, collect, setup, update
from prorl_jax.trainer.loop_state import LoopState, reset_reason
from prorl_jax.trainer.plan import Plan
from tests import loop_helpers


def test_train_batch_layout_by_hand():
  g = loop_helpers.group(
    [1.0, 0.0],
    prompt_ids=[7, 8, 9],
    lengths=[2, 4],
    tokens=np.array([[11, 12, 0, 0], [21, 22, 23, 24]]),
    gen_logp=np.array([[-0.1, -0.2, 0, 0], [-1.0, -2.0, -3.0, -4.0]], np.float32),
  )
  b = batch.build_batch([g], prompt_len=4, response_len=4, pad_id=0, rows=3)
  # prompt left-padded into 4 slots, response right-padded; the third row is empty padding
  assert b.tokens_BxT.tolist() == [
    [0, 7, 8, 9, 11, 12, 0, 0],
    [0, 7, 8, 9, 21, 22, 23, 24],
    [0, 0, 0, 0, 0, 0, 0, 0],
  ]
  assert b.attn_mask_BxT.tolist() == [
    [0, 1, 1, 1, 1, 1, 0, 0],
    [0, 1, 1, 1, 1, 1, 1, 1],
    [0, 0, 0, 1, 0, 0, 0, 0],  # an empty row sees one token (a finite softmax), never trained
  ]
  assert b.loss_mask_BxT.tolist() == [[0, 0, 0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 1, 1], [0] * 8]
  # the engine's log-prob of token t sits at t (the position that token occupies)
  np.testing.assert_allclose(b.gen_logp_BxT[0], [0, 0, 0, 0, -0.1, -0.2, 0, 0])
  np.testing.assert_allclose(b.gen_logp_BxT[1, 4:], [-1, -2, -3, -4])


def _algo(**algo):
  cfg = config_lib.base_config()
  cfg.algo.ref_reset_every = 0
  for k, v in algo.items():
    cfg.algo[k] = v
  return Plan.from_config(cfg).reset


def test_kl_spike_reset():
  a = _algo(ref_reset_kl_spike=0.5)
  assert reset_reason(a, 7, [0.1, 0.4], []) is None
  assert reset_reason(a, 8, [0.1, 0.4, 0.6], []) == "kl_spike"
  assert reset_reason(_algo(ref_reset_every=4), 8, [], []) == "schedule"
  assert reset_reason(_algo(ref_reset_every=4), 9, [], []) is None


def test_validation_stall_reset():
  a = _algo(ref_reset_stall_evals=2)
  assert reset_reason(a, 1, [], [0.30, 0.35, 0.36]) is None  # still improving
  # two validations below the best 0.40
  assert reset_reason(a, 1, [], [0.30, 0.40, 0.38, 0.39]) == "validation_stall"


def test_loop_state_round_trips_and_reads_old_checkpoints():
  s = LoopState(step=3, version=4, length_penalty={"on": True}, pass1_start=0.25)
  assert LoopState.from_json(json.loads(json.dumps(s.to_json()))) == s
  old = {"step": 2, "version": 2, "lp": {"on": False}, "pass@1_start": 0.5, "resets": []}
  got = LoopState.from_json(old)
  assert (got.length_penalty, got.pass1_start, got.step) == ({"on": False}, 0.5, 2)


def test_probe_mismatch_stops_the_run_in_one_line():
  arrays = {k: np.zeros((1, 1) if k in ("tokens", "logprobs") else 1) for k in Result.ARRAYS}

  def result(**manifest):
    return Result.of(dict(worker="w1", policy_version=3, **manifest), arrays)

  m = {"max": 0.02, "mean": 0.01}
  assert probe.reported_mismatch(result(probe_mismatch=m), 0.05) == {"max": 0.02, "mean": 0.01}
  assert probe.reported_mismatch(result(), 0.05) == {}
  bad = result(probe_mismatch={"max": 0.3, "mean": 0.1})
  with pytest.raises(
    WorkerFailure,
    match=r"mismatch 0.3 on the probe exceeds "
    r"rollout.max_probe_mismatch=0.05 \(worker w1, weights v3\)",
  ):
    probe.reported_mismatch(bad, 0.05)
  assert probe.reported_mismatch(bad, 0.0)["max"] == 0.3  # 0 = off: recorded, never fatal
  got = collect.Received()
  for mm in ({"max": 0.3, "mean": 0.1}, {"max": 0.02, "mean": 0.01}):
    got.probe(mm)
  assert got.info()["mismatch/probe_max"] == 0.3  # the worst of the step
  assert got.info()["mismatch/probe_mean"] == 0.01  # the last result's


def test_kl_in_reward_puts_minus_beta_k1_into_the_returns():
  # one prompt, 2 responses of 3 tokens; reinforce_pp: r_t = s·1[last] − β·kl_t, G_t = Σ_{u≥t}
  scores = np.array([[1.0, 0.0]])
  mask = np.ones((2, 3), np.float32)
  kl = np.array([[0.1, 0.2, 0.3], [0.0, 0.5, 0.0]], np.float32)
  adv = batch.token_advantages("reinforce_pp", scores, mask, kl_BxT=kl, kl_coef=0.5)
  g = np.array([[1 - 0.5 * 0.6, 1 - 0.5 * 0.5, 1 - 0.5 * 0.3], [-0.25, -0.25, 0.0]])
  want = (g - g.mean()) / np.sqrt(g.var() + 1e-8)
  np.testing.assert_allclose(np.asarray(adv), want, rtol=1e-5, atol=1e-5)
  no_kl = batch.token_advantages("reinforce_pp", scores, mask, kl_BxT=kl, kl_coef=0.0)
  assert not np.allclose(np.asarray(no_kl), want)


def test_entropy_bonus_by_hand():
  logp = jnp.zeros((1, 2))
  ent = jnp.array([[1.0, 3.0]])
  mask = jnp.ones((1, 2))
  kw = dict(clip_low=0.2, clip_high=0.28, agg="token-mean")
  base, _ = losses.rl_loss(logp, ent, logp, logp, jnp.zeros((1, 2)), mask, **kw)
  bonus, m = losses.rl_loss(logp, ent, logp, logp, jnp.zeros((1, 2)), mask, entropy_coef=0.1, **kw)
  assert float(base) == 0.0 and float(bonus) == pytest.approx(-0.1 * 2.0)
  assert float(m["actor/entropy"]) == pytest.approx(2.0)


def _groups():
  """Two groups i = 0, 1 of one prompt [1, 2] and responses [3, 4] + i and [5, 6, 7] + i (5
  trained tokens each), one right and one wrong."""
  return [
    loop_helpers.group(
      [1.0, 0.0], prompt_ids=[1, 2], lengths=[2, 3], tokens=np.array([[3, 4, 0], [5, 6, 7]]) + i
    )
    for i in range(2)
  ]


def _update(groups, train_step, logprobs, packed_train_step=None, *, epochs=1, packed=False):
  """`update.update` over `groups` with the model's functions given (a fake setup around the
  real update: its plan from the base config)."""
  cfg = config_lib.base_config()
  cfg.rollout.n, cfg.rollout.mini_batch_prompts = 2, 1
  cfg.rollout.max_prompt_len, cfg.rollout.max_response_len = 16, 16
  cfg.algo.epochs = epochs
  run = types.SimpleNamespace(
    plan=Plan.from_config(cfg),
    pad_id=0,
    rows=2,
    batch_shardings=None,
    train_step=train_step,
    logprobs=logprobs,
    slab_shape=(2, 8) if packed else None,
    slab_shardings=None,
    packed_train_step=packed_train_step,
    packed_logprobs=logprobs,
  )
  state = types.SimpleNamespace(params="policy", ref_params="reference")
  import prorl_jax.parallel.dist as dist  # the fake setup's arrays stay on the host

  orig = dist.global_batch
  dist.global_batch = lambda tree, shardings: tree
  try:
    return update.update(run, state, groups, step=1, length_penalty_on=False)
  finally:
    dist.global_batch = orig


@pytest.mark.parametrize("packed", [False, True])
def test_epochs_repeat_every_mini_batch_update(packed):
  calls = []

  def train_step(state, batch):
    calls.append(int(np.asarray(batch["tokens"]).sum()))
    return state, {"actor/loss": 0.0}

  def packed_train_step(state, slabs, counts):
    assert counts == (5.0, 2.0)  # the mini-batch's trained tokens and sequences
    calls.append(int(sum(np.asarray(s["tokens"]).sum() for s in slabs)))
    return state, {"actor/loss": 0.0}

  def logprobs(params, inputs):
    t = np.asarray(inputs["tokens"])
    return np.full(t.shape, -1.0, np.float32), np.ones(t.shape, np.float32)

  got = _update(_groups(), train_step, logprobs, packed_train_step, epochs=3, packed=packed)
  metrics = got.metrics
  assert len(calls) == 3 * 2 and metrics["actor/updates"] == 6
  assert calls[:2] == calls[2:4] == calls[4:]  # each epoch sees the same mini-batches
  # group i: prompt [1, 2] before responses [3, 4] + i and [5, 6, 7] + i, nothing else
  assert sorted(calls[:2]) == [2 * 3 + 3 + 4 + 5 + 6 + 7, 2 * 3 + 4 + 5 + 6 + 7 + 8]
  if packed:
    assert metrics["packing/slabs"] == 2 and metrics["packing/fill"] == 9 / 16


@pytest.mark.parametrize("packed", [False, True])
def test_the_update_returns_the_kl_to_the_reference_that_steers_the_loop(packed):
  """The old policy's k2 KL to the reference per trained token, a typed field of the update (the
  KL-spike reset reads it): here the policy gives each token log-prob -1 and the reference
  -1.5 to tokens 3 and 8 (one trained token in each group), so 0.5 * 0.5^2 on 2 of the 10."""

  def logprobs(params, inputs):
    t = np.asarray(inputs["tokens"])
    old = np.full(t.shape, -1.0, np.float32)
    if params == "reference":
      old = np.where((t == 3) | (t == 8), -1.5, old)
    return old, np.ones(t.shape, np.float32)

  step = lambda state, *a: (state, {"actor/loss": 0.0})  # noqa: E731
  got = _update(_groups(), step, logprobs, step, packed=packed)
  assert got.kl_ref == pytest.approx(0.5 * 0.25 * 2 / 10)
  assert got.metrics["actor/kl_ref_old"] == got.kl_ref


def test_sampler_top_k_1_is_greedy():
  cfg = presets.tiny(vocab_size=32)
  params = init_params(cfg, jax.random.PRNGKey(0))
  prompts = [[1, 5, 6], [2, 9]]
  greedy = generate(cfg, params, prompts, SamplingParams(max_new_tokens=6, temperature=0.0), seed=0)
  for seed in range(3):
    top1 = generate(
      cfg, params, prompts, SamplingParams(max_new_tokens=6, temperature=1.0, top_k=1), seed=seed
    )
    assert np.array_equal(top1.tokens, greedy.tokens)
  wide = [
    generate(
      cfg, params, prompts, SamplingParams(max_new_tokens=6, temperature=1.0, top_k=0), seed=s
    ).tokens
    for s in range(3)
  ]
  assert any(not np.array_equal(w, greedy.tokens) for w in wide)  # top-k off does sample


def test_attention_implementation_choice():
  mc = types.SimpleNamespace(attention_impl="auto", compute_dtype="bfloat16")
  assert setup.attention_impl(mc) == ("cudnn" if jax.default_backend() == "gpu" else "xla")
  mc.compute_dtype = "float32"
  assert setup.attention_impl(mc) == "xla"  # no fused float32 kernel
  mc.attention_impl = "cudnn"
  assert setup.attention_impl(mc) == "cudnn"  # explicit wins
