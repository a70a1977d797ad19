"""Advantage estimators, as pure array functions.

Legend: P prompts, N responses per prompt, B = P·N sequences (prompt-major: all N responses of
prompt 0, then prompt 1, ...), T token columns. `mask_BxT` is 1 on valid response tokens.

Batch statistics are sums over the whole array the function is given: the trainer calls these on
the full host batch of a step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from prorl_jax.algo import ESTIMATORS


def masked_whiten(x_BxT, mask_BxT, *, unbiased: bool = False, eps: float = 1e-8):
  """(x − μ)·rsqrt(max(var, eps)) over valid tokens; padding stays 0.

  Token-weighted statistics with the biased variance (NeMo-RL / OpenRLHF); `unbiased=True` gives
  verl's Bessel-corrected variance, `(x − μ)·rsqrt(var + eps)`.
  """
  m = mask_BxT.astype(jnp.float32)
  n = jnp.sum(m)
  mean = jnp.sum(x_BxT * m) / jnp.maximum(n, 1.0)
  sq = jnp.sum(jnp.square(x_BxT - mean) * m)
  if unbiased:
    var = sq / jnp.maximum(n - 1.0, 1.0)
    scale = jax.lax.rsqrt(var + eps)
  else:
    var = sq / jnp.maximum(n, 1.0)
    scale = jax.lax.rsqrt(jnp.maximum(var, eps))
  return (x_BxT - mean) * scale * m


def _group_stats(scores_PxN):
  n = scores_PxN.shape[1]
  mean_P = jnp.mean(scores_PxN, axis=1, keepdims=True)
  std_P = jnp.std(scores_PxN, axis=1, keepdims=True, ddof=1) if n > 1 else jnp.ones_like(mean_P)
  return mean_P, std_P


def grpo(scores_PxN, eps: float = 1e-6):
  """(s − μ_g)/(σ_g + eps), σ_g the unbiased group std; a group of one gets μ=0, σ=1 (verl)."""
  if scores_PxN.shape[1] == 1:
    return scores_PxN / (1.0 + eps)
  mean, std = _group_stats(scores_PxN)
  return (scores_PxN - mean) / (std + eps)


def dr_grpo(scores_PxN):
  """s − μ_g (no std division; pair with seq-mean-token-sum-norm aggregation)."""
  return scores_PxN - jnp.mean(scores_PxN, axis=1, keepdims=True)


def rloo(scores_PxN):
  """s_i − mean of the other n−1 responses = n/(n−1)·(s_i − μ_g)."""
  n = scores_PxN.shape[1]
  if n < 2:
    raise ValueError("rloo needs at least 2 responses per prompt (rollout.n >= 2)")
  return (scores_PxN * n - jnp.sum(scores_PxN, axis=1, keepdims=True)) / (n - 1)


def broadcast(seq_B, mask_BxT):
  """A per-sequence value on every valid token."""
  return seq_B[:, None] * mask_BxT.astype(jnp.float32)


def reinforce_pp_baseline(scores_PxN, mask_BxT, *, unbiased: bool = False):
  """ProRL v2: subtract the group mean, broadcast, whiten over all valid tokens of the batch."""
  local_B = dr_grpo(scores_PxN).reshape(-1)
  return masked_whiten(broadcast(local_B, mask_BxT), mask_BxT, unbiased=unbiased)


def reinforce_pp(scores_B, mask_BxT, *, kl_BxT=None, kl_coef: float = 0.0, unbiased: bool = False):
  """REINFORCE++: r_t = s·1[t = last] − β·kl_t, G_t = Σ_{u≥t} r_u (γ = 1), then whiten."""
  m = mask_BxT.astype(jnp.float32)
  # The last valid token of each row: the valid token with no valid token after it.
  after = jnp.flip(jnp.cumsum(jnp.flip(m, -1), -1), -1) - m
  last_BxT = m * (after == 0)
  r_BxT = scores_B[:, None] * last_BxT
  if kl_BxT is not None:
    r_BxT = r_BxT - kl_coef * kl_BxT * m
  returns_BxT = jnp.flip(jnp.cumsum(jnp.flip(r_BxT, -1), -1), -1) * m
  return masked_whiten(returns_BxT, mask_BxT, unbiased=unbiased)


def compute_advantages(
  estimator: str,
  scores_PxN,
  mask_BxT,
  *,
  kl_BxT=None,
  kl_coef: float = 0.0,
  boost: float = 0.0,
  correct_PxN=None,
  unbiased: bool = False,
):
  """Token advantages [B, T] for B = P·N prompt-major rows.

  Args:
    estimator: one of ESTIMATORS.
    scores_PxN: shaped scalar scores.
    mask_BxT: valid response tokens.
    kl_BxT, kl_coef: k1 to the reference, subtracted in the reward (reinforce_pp only).
    boost: added to every token of responses with `correct_PxN` true, after normalisation
      ([FK]'s correct-sample boost; 0 = off).
    correct_PxN: which responses count as correct for the boost (default: score >= 1).
    unbiased: Bessel-corrected variance in the whitening (verl) instead of biased (NeMo-RL).
  """
  scores_PxN = jnp.asarray(scores_PxN, jnp.float32)
  p, n = scores_PxN.shape
  if p * n != mask_BxT.shape[0]:
    raise ValueError(
      f"scores are {p}x{n} = {p * n} sequences but the mask has {mask_BxT.shape[0]} rows"
    )
  if estimator == "reinforce_pp_baseline":
    adv = reinforce_pp_baseline(scores_PxN, mask_BxT, unbiased=unbiased)
  elif estimator == "reinforce_pp":
    adv = reinforce_pp(
      scores_PxN.reshape(-1), mask_BxT, kl_BxT=kl_BxT, kl_coef=kl_coef, unbiased=unbiased
    )
  elif estimator in ("grpo", "rloo", "dr_grpo"):
    fn = {"grpo": grpo, "rloo": rloo, "dr_grpo": dr_grpo}[estimator]
    adv = broadcast(fn(scores_PxN).reshape(-1), mask_BxT)
  else:
    raise ValueError(f"unknown advantage estimator {estimator!r}; one of {', '.join(ESTIMATORS)}")
  if boost:
    correct = scores_PxN >= 1.0 if correct_PxN is None else jnp.asarray(correct_PxN, bool)
    adv = adv + boost * broadcast(correct.reshape(-1).astype(jnp.float32), mask_BxT)
  return adv
