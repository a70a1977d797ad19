"""Advantage estimators: hand-computed cases and properties."""

import hypothesis.extra.numpy as hnp
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prorl_jax.algo.advantages import compute_advantages, masked_whiten, rloo

A = np.testing.assert_allclose


def _mask(lengths, t):
  return (np.arange(t)[None] < np.asarray(lengths)[:, None]).astype(np.float32)


def test_grpo_by_hand():
  # scores 1,0,0,1: mean 0.5; unbiased std = sqrt(4·0.25/3) = 0.5773503; A = ±0.5/0.5773503
  adv = compute_advantages("grpo", [[1.0, 0.0, 0.0, 1.0]], _mask([2, 1, 1, 2], 2))
  A(adv[:, 0], [0.8660240, -0.8660240, -0.8660240, 0.8660240], atol=1e-6)
  A(adv[:, 1], [0.8660240, 0.0, 0.0, 0.8660240], atol=1e-6)  # padding is 0


def test_rloo_and_dr_grpo_by_hand():
  m = _mask([1, 1, 1, 1], 1)
  # RLOO: 1 − mean(0,0,0) = 1; 0 − mean(1,0,0) = −1/3
  A(
    compute_advantages("rloo", [[1.0, 0.0, 0.0, 0.0]], m)[:, 0],
    [1, -1 / 3, -1 / 3, -1 / 3],
    atol=1e-6,
  )
  # Dr. GRPO: s − 0.25
  A(
    compute_advantages("dr_grpo", [[1.0, 0.0, 0.0, 0.0]], m)[:, 0],
    [0.75, -0.25, -0.25, -0.25],
    atol=1e-6,
  )


def test_reinforce_pp_baseline_by_hand():
  # Group [1, 0] -> local baseline [0.5, −0.5]; row 0 has 1 token, row 1 has 3.
  # Tokens: 0.5, −0.5, −0.5, −0.5: mean −0.25; deviations 0.75, −0.25 ×3;
  # biased var = (0.5625 + 3·0.0625)/4 = 0.1875 -> A = 0.75/√0.1875 = √3, −0.25/√0.1875 = −1/√3.
  m = _mask([1, 3], 3)
  adv = np.asarray(compute_advantages("reinforce_pp_baseline", [[1.0, 0.0]], m))
  A(adv, [[np.sqrt(3), 0, 0], [-1 / np.sqrt(3)] * 3], atol=1e-5)
  # verl's unbiased variance: 0.75/3 = 0.25 -> 0.75/0.5 = 1.5, −0.25/0.5 = −0.5.
  adv_u = np.asarray(compute_advantages("reinforce_pp_baseline", [[1.0, 0.0]], m, unbiased=True))
  A(adv_u, [[1.5, 0, 0], [-0.5] * 3], atol=1e-5)


def test_reinforce_pp_by_hand():
  # β = 0.5; row 0 (score 1, 2 tokens, kl 0.1, 0.2): r = −0.05, 1 − 0.1 = 0.9 -> G = 0.85, 0.9
  # row 1 (score 0, 3 tokens, kl 0, 0.5, 0.1): r = 0, −0.25, −0.05 -> G = −0.3, −0.3, −0.05
  # whiten: mean 1.1/5 = 0.22; dev 0.63 0.68 −0.52 −0.52 −0.27; var = 1.473/5 = 0.2946
  m = _mask([2, 3], 3)
  kl = np.array([[0.1, 0.2, 9.0], [0.0, 0.5, 0.1]], np.float32)
  adv = np.asarray(compute_advantages("reinforce_pp", [[1.0], [0.0]], m, kl_BxT=kl, kl_coef=0.5))
  std = np.sqrt(0.2946)
  A(adv, np.array([[0.63, 0.68, 0], [-0.52, -0.52, -0.27]]) / std * m, atol=1e-5)


def test_boost_adds_to_correct_responses_after_normalisation():
  m = _mask([1, 3], 3)
  base = np.asarray(compute_advantages("reinforce_pp_baseline", [[1.0, 0.0]], m))
  boosted = np.asarray(compute_advantages("reinforce_pp_baseline", [[1.0, 0.0]], m, boost=0.1))
  A(boosted - base, [[0.1, 0, 0], [0, 0, 0]], atol=1e-6)


def test_shape_mismatch_and_unknown_estimator_are_errors():
  with pytest.raises(ValueError, match="2x2 = 4 sequences but the mask has 3 rows"):
    compute_advantages("grpo", np.zeros((2, 2)), np.ones((3, 4)))
  with pytest.raises(ValueError, match="unknown advantage estimator 'gae'"):
    compute_advantages("gae", np.zeros((1, 2)), np.ones((2, 4)))


@settings(max_examples=40, deadline=None)
@given(
  hnp.arrays(np.float32, (12, 5), elements=st.floats(-10, 10, width=32)),
  st.lists(st.integers(1, 5), min_size=12, max_size=12),
)
def test_whitened_token_weighted_mean0_var1(x, lengths):
  m = _mask(lengths, 5)
  vals = x[m > 0]
  if vals.std() < 1e-2:
    return  # (near-)constant input: whitening is 0 by the eps floor, tested below
  w = np.asarray(masked_whiten(jnp.asarray(x), jnp.asarray(m)))
  assert abs(w[m > 0].mean()) < 1e-4
  assert abs(w[m > 0].var() - 1.0) < 1e-3
  assert (w[m == 0] == 0).all()


def test_whiten_constant_input_is_zero_not_nan():
  w = np.asarray(masked_whiten(jnp.ones((2, 3)), jnp.ones((2, 3))))
  assert np.isfinite(w).all() and (w == 0).all()


@settings(max_examples=40, deadline=None)
@given(
  hnp.arrays(
    np.float32, st.tuples(st.integers(1, 5), st.integers(2, 8)), elements=st.floats(-5, 5, width=32)
  )
)
def test_rloo_equals_scaled_group_mean_subtraction(s):
  n = s.shape[1]
  A(np.asarray(rloo(jnp.asarray(s))), n / (n - 1) * (s - s.mean(1, keepdims=True)), atol=1e-4)


@settings(max_examples=25, deadline=None)
@given(
  st.sampled_from(["reinforce_pp_baseline", "grpo", "rloo", "dr_grpo", "reinforce_pp"]),
  hnp.arrays(np.float32, (6,), elements=st.floats(0, 1, width=32)),
  hnp.arrays(np.float32, (6, 4), elements=st.floats(-100, 100, width=32)),
)
def test_padding_never_affects_advantages(est, scores, junk):
  m = _mask([4, 1, 2, 3, 4, 2], 4)
  kl = np.where(m > 0, 0.1, junk)  # junk only on padding
  kw = dict(kl_BxT=jnp.asarray(kl), kl_coef=0.3) if est == "reinforce_pp" else {}
  adv = np.asarray(compute_advantages(est, scores.reshape(3, 2), jnp.asarray(m), **kw))
  kw2 = dict(kl_BxT=jnp.asarray(np.where(m > 0, 0.1, 0.0)), kl_coef=0.3) if kw else {}
  adv2 = np.asarray(compute_advantages(est, scores.reshape(3, 2), jnp.asarray(m), **kw2))
  A(adv, adv2, atol=1e-6)
  assert (adv[m == 0] == 0).all()
