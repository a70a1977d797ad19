"""PPO-clip, aggregation, KL, IS weights, chunked log-probs: hand-computed cases and properties."""

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prorl_jax.algo import losses

A = np.testing.assert_allclose
CLIP = dict(clip_low=0.2, clip_high=0.28)


def test_policy_loss_by_hand():
  # A = 1, −1, 1, −1 with ρ = 1.5, 0.5, 0.9, 1.1 and ε = 0.2/0.28:
  # t0: max(−1.5, −1.28) = −1.28 (upper clip); t1: max(0.5, 0.8) = 0.8 (lower clip);
  # t2: −0.9; t3: 1.1. token-mean = (−1.28 + 0.8 − 0.9 + 1.1)/4 = −0.07.
  old = jnp.zeros((1, 4))
  logp = jnp.log(jnp.array([[1.5, 0.5, 0.9, 1.1]]))
  adv = jnp.array([[1.0, -1.0, 1.0, -1.0]])
  loss, m = losses.policy_loss(logp, old, adv, jnp.ones((1, 4)), **CLIP)
  A(loss, -0.07, atol=1e-6)
  A(m["actor/clipfrac"], 0.5)
  A(m["actor/clipfrac_upper"], 0.25)
  A(m["actor/clipfrac_lower"], 0.25)
  # ppo_kl = mean(old − logp) = −(log1.5 + log0.5 + log0.9 + log1.1)/4
  A(m["actor/ppo_kl"], -np.log(1.5 * 0.5 * 0.9 * 1.1) / 4, atol=1e-6)


def test_dual_clip_by_hand():
  # A = −1, ρ = 5: max(5, clip(5)=1.28) = 5; dual-clip c = 3 caps it at −c·A = 3.
  logp, old, adv = jnp.log(jnp.array([[5.0]])), jnp.zeros((1, 1)), -jnp.ones((1, 1))
  loss, _ = losses.policy_loss(logp, old, adv, jnp.ones((1, 1)), **CLIP)
  A(loss, 5.0, atol=1e-5)
  loss, m = losses.policy_loss(logp, old, adv, jnp.ones((1, 1)), dual_clip=3.0, **CLIP)
  A(loss, 3.0, atol=1e-6)
  A(m["actor/dual_clipfrac"], 1.0)
  # Positive advantages are never dual-clipped: A = 1, ρ = 0.1 -> max(−0.1, −0.8) = −0.1
  loss, _ = losses.policy_loss(
    jnp.log(jnp.array([[0.1]])), old, jnp.ones((1, 1)), jnp.ones((1, 1)), dual_clip=3.0, **CLIP
  )
  A(loss, -0.1, atol=1e-6)


def test_log_ratio_clamp():
  # logp − old = 50 is clamped to 20: ρ = e^20, A = −1 -> loss = e^20
  loss, _ = losses.policy_loss(
    jnp.array([[50.0]]), jnp.zeros((1, 1)), -jnp.ones((1, 1)), jnp.ones((1, 1)), **CLIP
  )
  A(loss, np.exp(20.0), rtol=1e-5)


def test_is_weights_scale_per_token_loss():
  # Same as the hand case with weights 1, 0, 2, 1: (−1.28 + 0 − 1.8 + 1.1)/4 = −0.495
  loss, _ = losses.policy_loss(
    jnp.log(jnp.array([[1.5, 0.5, 0.9, 1.1]])),
    jnp.zeros((1, 4)),
    jnp.array([[1.0, -1.0, 1.0, -1.0]]),
    jnp.ones((1, 4)),
    is_weights=jnp.array([[1.0, 0.0, 2.0, 1.0]]),
    **CLIP,
  )
  A(loss, -0.495, atol=1e-6)


def test_aggregation_modes_by_hand():
  x = jnp.array([[1.0, 2.0, 7.0], [3.0, 9.0, 9.0]])
  m = jnp.array([[1, 1, 0], [1, 0, 0]])
  A(losses.aggregate(x, m, "token-mean"), 6 / 3)  # (1 + 2 + 3)/3
  A(losses.aggregate(x, m, "seq-mean-token-mean"), (1.5 + 3) / 2)
  A(losses.aggregate(x, m, "seq-mean-token-sum"), (3 + 3) / 2)
  A(losses.aggregate(x, m, "seq-mean-token-sum-norm", norm_const=4.0), 6 / 4)
  A(losses.aggregate(x, m, "token-mean", num_tokens=12), 6 / 12)
  with pytest.raises(ValueError, match="needs norm_const"):
    losses.aggregate(x, m, "seq-mean-token-sum-norm")


def test_kl_estimators_by_hand():
  logp, ref = jnp.array([[-1.0, 29.0]]), jnp.array([[-1.5, -1.0]])
  # δ = 0.5: k1 = 0.5, k2 = 0.125, k3 = e^−0.5 − 1 + 0.5 = 0.1065307; δ = 30 clamps to 10
  A(losses.kl_penalty(logp, ref, "k1"), [[0.5, 10.0]], atol=1e-6)
  A(losses.kl_penalty(logp, ref, "k2"), [[0.125, 50.0]], atol=1e-6)
  A(losses.kl_penalty(logp, ref, "k3"), [[0.1065307, np.exp(-10) + 9.0]], atol=1e-5)


def test_importance_weights_by_hand():
  # w = exp(ℓold − ℓgen) = 1, 3, 0.25, 10
  old = jnp.full((1, 4), -1.0)
  gen = old - jnp.log(jnp.array([[1.0, 3.0, 0.25, 10.0]]))
  m = jnp.ones((1, 4))
  A(losses.importance_weights(old, gen, m, "none")[0], [[1, 1, 1, 1]])
  A(losses.importance_weights(old, gen, m, "tis", cap=2.0)[0], [[1, 2, 0.25, 2]], atol=1e-5)
  w, met = losses.importance_weights(old, gen, m, "icepop", low=0.5, high=5.0)
  A(w, [[1, 3, 0, 0]], atol=1e-5)
  A(met["is/out_of_band_frac"], 0.5)
  A(met["is/raw_max"], 10.0, rtol=1e-5)


def _sym_ppo(logp, old, adv, mask, eps):
  ratio = jnp.exp(logp - old)
  obj = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - eps, 1 + eps) * adv)
  return -jnp.sum(obj * mask) / jnp.sum(mask)


@settings(max_examples=40, deadline=None)
@given(
  hnp.arrays(np.float32, (3, 6), elements=st.floats(-2, 2, width=32)),
  hnp.arrays(np.float32, (3, 6), elements=st.floats(-2, 2, width=32)),
  st.floats(0.05, 0.5),
)
def test_clip_higher_equal_eps_is_symmetric_ppo(dlogp, adv, eps):
  old = jnp.zeros((3, 6))
  mask = jnp.asarray((np.arange(6)[None] < np.array([[6], [3], [1]])).astype(np.float32))
  f = lambda lp: losses.policy_loss(lp, old, adv, mask, clip_low=eps, clip_high=eps)[0]  # noqa: E731
  A(f(jnp.asarray(dlogp)), _sym_ppo(jnp.asarray(dlogp), old, adv, mask, eps), atol=1e-5)
  g1 = jax.grad(f)(jnp.asarray(dlogp))
  g2 = jax.grad(lambda lp: _sym_ppo(lp, old, adv, mask, eps))(jnp.asarray(dlogp))
  A(g1, g2, atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(
  hnp.arrays(np.float32, (5,), elements=st.floats(-3, 3, width=32)),
  hnp.arrays(np.float32, (5,), elements=st.floats(-3, 3, width=32)),
  st.integers(0, 4),
)
def test_k2_gradient_is_delta_times_grad_logp(theta, ref_theta, a):
  # A softmax policy over 5 actions; the sampled action a.
  logp_fn = lambda th: jax.nn.log_softmax(th)[a]  # noqa: E731
  ref = logp_fn(jnp.asarray(ref_theta))
  g = jax.grad(lambda th: losses.kl_penalty(logp_fn(th), ref, "k2", clamp=100.0))(
    jnp.asarray(theta)
  )
  delta = logp_fn(jnp.asarray(theta)) - ref
  A(g, delta * jax.grad(logp_fn)(jnp.asarray(theta)), atol=1e-5)


@pytest.mark.parametrize("agg", losses.AGG_MODES)
def test_micro_batches_with_global_counts_equal_full_batch(agg):
  rng = np.random.RandomState(0)
  b, t = 8, 6
  lengths = rng.randint(1, t + 1, size=b)
  mask = jnp.asarray((np.arange(t)[None] < lengths[:, None]).astype(np.float32))
  logp = jnp.asarray(rng.randn(b, t).astype(np.float32) * 0.3)
  old = jnp.asarray(rng.randn(b, t).astype(np.float32) * 0.3)
  ref = jnp.asarray(rng.randn(b, t).astype(np.float32) * 0.3)
  adv = jnp.asarray(rng.randn(b, t).astype(np.float32))
  kw = dict(
    clip_low=0.2,
    clip_high=0.28,
    agg=agg,
    kl_coef=0.1,
    norm_const=6.0,
    num_tokens=jnp.sum(mask),
    num_seqs=float(b),
  )

  def loss(lp, sl):
    return losses.rl_loss(lp, jnp.zeros_like(lp), old[sl], ref[sl], adv[sl], mask[sl], **kw)[0]

  full = loss(logp, slice(None))
  g_full = jax.grad(loss)(logp, slice(None))
  parts = [slice(i, i + 2) for i in range(0, b, 2)]
  micro = sum(loss(logp[s], s) for s in parts)
  g_micro = jnp.concatenate([jax.grad(loss)(logp[s], s) for s in parts])
  A(micro, full, rtol=1e-5, atol=1e-7)
  A(g_micro, g_full, rtol=1e-5, atol=1e-7)
  # The per-micro-batch mean (the known bug) differs for token-mean with ragged lengths.
  if agg == "token-mean":
    kw_bad = dict(kw, num_tokens=None)
    bad = sum(
      losses.rl_loss(logp[s], jnp.zeros_like(logp[s]), old[s], ref[s], adv[s], mask[s], **kw_bad)[0]
      for s in parts
    ) / len(parts)
    assert abs(float(bad - full)) > 1e-4


@settings(max_examples=25, deadline=None)
@given(
  hnp.arrays(np.float32, (4, 5), elements=st.floats(-50, 50, width=32)),
  st.sampled_from(losses.AGG_MODES),
)
def test_padding_never_affects_loss_or_grads(junk, agg):
  rng = np.random.RandomState(1)
  mask = jnp.asarray((np.arange(5)[None] < np.array([[5], [2], [1], [3]])).astype(np.float32))
  logp = jnp.asarray(rng.randn(4, 5).astype(np.float32) * 0.2)
  put = lambda x: jnp.where(mask > 0, x, junk)  # noqa: E731
  old, ref, adv = (jnp.asarray(rng.randn(4, 5).astype(np.float32) * s) for s in (0.2, 0.2, 1.0))
  kw = dict(clip_low=0.2, clip_high=0.28, agg=agg, kl_coef=0.1, norm_const=5.0, dual_clip=3.0)

  def f(lp, o, r, a):
    return losses.rl_loss(lp, jnp.zeros_like(lp), o, r, a, mask, **kw)[0]

  clean, dirty = f(logp, old, ref, adv), f(put(logp), put(old), put(ref), put(adv))
  A(clean, dirty, rtol=1e-6)
  g_clean, g_dirty = (
    jax.grad(f)(logp, old, ref, adv),
    jax.grad(f)(put(logp), put(old), put(ref), put(adv)),
  )
  A(g_clean * mask, g_dirty * mask, rtol=1e-6)
  assert (np.asarray(g_dirty)[np.asarray(mask) == 0] == 0).all()


@pytest.mark.parametrize("chunk,temp", [(3, 1.0), (4, 0.6), (128, 1.2)])
def test_chunked_logprobs_equal_full_logits(chunk, temp):
  rng = np.random.RandomState(0)
  h = jnp.asarray(rng.randn(2, 10, 8).astype(np.float32))
  w = jnp.asarray(rng.randn(8, 13).astype(np.float32))
  y = jnp.asarray(rng.randint(0, 13, size=(2, 10)))
  logits = jnp.einsum("btd,dv->btv", h, w)
  ref_lp, ref_ent = losses.logprobs_from_logits(logits, y, temp)
  # Independent reference: log_softmax(z/τ) at y, entropy −Σ p log p.
  lsm = jax.nn.log_softmax(logits / temp)
  A(ref_lp, jnp.take_along_axis(lsm, y[..., None], -1)[..., 0], atol=1e-5)
  A(ref_ent, -jnp.sum(jnp.exp(lsm) * lsm, -1), atol=1e-5)
  lp, ent = losses.token_logprobs(h, w, y, temp, chunk=chunk)
  A(lp, ref_lp, atol=1e-5)
  A(ent, ref_ent, atol=5e-5)  # lse − Σpz cancels at |z| ~ 20
  g = jax.grad(lambda hh: losses.token_logprobs(hh, w, y, temp, chunk=chunk)[0].sum())(h)
  g_ref = jax.grad(
    lambda hh: losses.logprobs_from_logits(jnp.einsum("btd,dv->btv", hh, w), y, temp)[0].sum()
  )(h)
  A(g, g_ref, atol=1e-4)


def _ref_log_ratios(source: str) -> list[int]:
  """Lines where a log-prob is subtracted from or by a reference log-prob (a KL estimate)."""
  import ast

  out = []
  for n in ast.walk(ast.parse(source)):
    if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub):
      sides = [ast.unparse(n.left).lower(), ast.unparse(n.right).lower()]
      if all("logp" in s for s in sides) and any("ref" in s for s in sides):
        out.append(n.lineno)
  return out


def test_the_kl_to_the_reference_is_estimated_in_one_place():
  """The loss, the KL in the reward and the reference reset's monitor all use
  `losses.kl_penalty`: no other module computes a log-ratio to the reference."""
  import pathlib

  root = pathlib.Path(losses.__file__).resolve().parent.parent
  found = {
    str(p.relative_to(root)): lines
    for p in sorted(root.rglob("*.py"))
    if p.name != "losses.py" and (lines := _ref_log_ratios(p.read_text()))
  }
  assert found == {}, found
  assert _ref_log_ratios("k = 0.5 * np.square(b.old_logp_BxT - b.ref_logp_BxT)\n") == [1]
  old, ref = np.array([[-1.0, -30.0]]), np.array([[-1.5, -2.0]])
  np.testing.assert_allclose(losses.kl_penalty(old, ref, "k2", 10.0, xp=np), [[0.125, 50.0]])
  assert isinstance(losses.kl_penalty(old, ref, "k1", 10.0, xp=np), np.ndarray)
