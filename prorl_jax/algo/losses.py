"""Token log-probs, the clipped surrogate, KL estimators, importance weights, aggregation.

Equation by equation, as pure array functions: no model, no config. Legend: B rows (one
sequence each, or packed rows described by `seq_tokens_BxT`), T token columns, D hidden,
V vocabulary, C a sequence chunk.
Every per-token input is aligned with `mask_BxT` (1 on valid response tokens).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from prorl_jax.algo import AGG_MODES

# ----------------------------------------------------------------------------- log-probs


def logprobs_from_logits(logits_BxTxV, targets_BxT, temperature: float = 1.0):
  """log softmax(logits/τ) at the targets, and the entropy of softmax(logits/τ); float32."""
  z = logits_BxTxV.astype(jnp.float32) / temperature
  lse = jax.nn.logsumexp(z, axis=-1)
  logp = jnp.take_along_axis(z, targets_BxT[..., None], axis=-1)[..., 0] - lse
  probs = jnp.exp(z - lse[..., None])
  entropy = lse - jnp.sum(probs * z, axis=-1)
  return logp, entropy


def token_logprobs(hidden_BxTxD, head_DxV, targets_BxT, temperature: float = 1.0, chunk: int = 128):
  """Log-probs and entropy of the targets from hidden states, `chunk` positions at a time.

  Only one float32 [B, chunk, V] block of logits exists at a time, in the forward pass and (by
  rematerialising each chunk) in the backward pass: the full [B, T, V] float32 logits of a
  1.5B model at 8k tokens would be ~5 GB per sequence.
  """
  b, t, d = hidden_BxTxD.shape
  c = min(chunk, t)
  pad = (-t) % c
  if pad:
    hidden_BxTxD = jnp.pad(hidden_BxTxD, ((0, 0), (0, pad), (0, 0)))
    targets_BxT = jnp.pad(targets_BxT, ((0, 0), (0, pad)))
  n = (t + pad) // c
  h_NxBxCxD = hidden_BxTxD.reshape(b, n, c, d).swapaxes(0, 1)
  y_NxBxC = targets_BxT.reshape(b, n, c).swapaxes(0, 1)

  def one(h_BxCxD, y_BxC):
    logits = jnp.einsum("bcd,dv->bcv", h_BxCxD, head_DxV.astype(h_BxCxD.dtype))
    return logprobs_from_logits(logits, y_BxC, temperature)

  if n == 1:  # one chunk: nothing to save by recomputing the logits in the backward pass
    return one(hidden_BxTxD, targets_BxT)
  one = jax.checkpoint(one)

  logp_NxBxC, ent_NxBxC = jax.lax.map(lambda a: one(*a), (h_NxBxCxD, y_NxBxC))
  unchunk = lambda x: x.swapaxes(0, 1).reshape(b, n * c)[:, :t]  # noqa: E731
  return unchunk(logp_NxBxC), unchunk(ent_NxBxC)


# ----------------------------------------------------------------------------- aggregation


def aggregate(
  x_BxT,
  mask_BxT,
  mode: str = "token-mean",
  *,
  num_tokens=None,
  num_seqs=None,
  norm_const=None,
  seq_tokens_BxT=None,
):
  """The four loss aggregation modes.

  `num_tokens` / `num_seqs` are the *global* counts of the mini-batch: pass them when this call
  sees one micro-batch, so that the micro-batch losses sum to the full-batch loss. Without them
  the counts of `mask_BxT` itself are used. Sequences with no valid token never count.
  One sequence per row unless `seq_tokens_BxT` is given (packed rows): then each token carries
  the valid-token count of its own sequence, and a sequence's mean is Σ x / seq_tokens.
  """
  m = mask_BxT.astype(jnp.float32)
  x = jnp.where(m > 0, x_BxT, 0.0)
  if seq_tokens_BxT is None:
    tok_per_seq = jnp.sum(m, axis=-1, keepdims=True)
    per_seq_count = (tok_per_seq > 0).astype(jnp.float32)
  else:
    tok_per_seq = seq_tokens_BxT.astype(jnp.float32)
    per_seq_count = m / jnp.maximum(tok_per_seq, 1.0)  # each sequence's tokens sum to 1
  if num_seqs is None:
    num_seqs = jnp.sum(per_seq_count)
  if mode == "token-mean":
    denom = jnp.sum(m) if num_tokens is None else num_tokens
    return jnp.sum(x) / jnp.maximum(denom, 1.0)
  if mode == "seq-mean-token-mean":
    return jnp.sum(x / jnp.maximum(tok_per_seq, 1.0)) / jnp.maximum(num_seqs, 1.0)
  if mode == "seq-mean-token-sum":
    return jnp.sum(x) / jnp.maximum(num_seqs, 1.0)
  if mode == "seq-mean-token-sum-norm":
    if norm_const is None:
      raise ValueError("seq-mean-token-sum-norm needs norm_const (e.g. the max response length)")
    return jnp.sum(x) / norm_const
  raise ValueError(f"unknown aggregation {mode!r}; one of {', '.join(AGG_MODES)}")


# ----------------------------------------------------------------------------- KL


def kl_penalty(logp_BxT, ref_logp_BxT, kind: str = "k2", clamp: float = 10.0, xp=jnp):
  """Per-token KL estimate to the reference, δ = clamp(ℓθ − ℓref, ±clamp).

  k1 = δ; k2 = ½δ² (its gradient is δ·∇ℓθ, unbiased on-policy); k3 = exp(−δ) − 1 + δ.
  The one estimator code: the loss calls it with jax.numpy, the trainer's host-side values (the
  KL in the reward, the reference reset's monitor) with numpy (`xp=np`).
  """
  delta = xp.clip(logp_BxT - ref_logp_BxT, -clamp, clamp)
  if kind == "k1":
    return delta
  if kind == "k2":
    return 0.5 * xp.square(delta)
  if kind == "k3":
    return xp.exp(-delta) - 1.0 + delta
  raise ValueError(f"unknown KL estimator {kind!r}; one of k1, k2, k3")


# ----------------------------------------------------------------------------- IS weights


def importance_weights(
  old_logp_BxT,
  gen_logp_BxT,
  mask_BxT,
  mode: str = "icepop",
  *,
  cap: float = 2.0,
  low: float = 0.5,
  high: float = 5.0,
  num_tokens=None,
):
  """Engine/trainer mismatch weights w = exp(ℓold − ℓgen), stop-gradient.

  none: 1. tis: min(w, cap). icepop: w·1[low ≤ w ≤ high]. Returns (w_BxT, metrics); the mean
  metrics divide by `num_tokens` (the mini-batch's global count) when given.
  """
  m = mask_BxT.astype(jnp.float32)
  raw = jnp.exp(jnp.clip(old_logp_BxT - gen_logp_BxT, -20.0, 20.0)) * m
  if mode == "none":
    w = m
  elif mode == "tis":
    w = jnp.minimum(raw, cap)
  elif mode == "icepop":
    w = jnp.where((raw >= low) & (raw <= high), raw, 0.0)
  else:
    raise ValueError(f"unknown importance correction {mode!r}; one of none, tis, icepop")
  w = jax.lax.stop_gradient(w * m)
  n = jnp.maximum(jnp.sum(m) if num_tokens is None else num_tokens, 1.0)
  big = jnp.where(m > 0, raw, -jnp.inf)
  small = jnp.where(m > 0, raw, jnp.inf)
  metrics = {
    "is/raw_mean": jnp.sum(raw) / n,
    "is/raw_max": jnp.max(big),
    "is/raw_min": jnp.min(small),
    "is/weight_mean": jnp.sum(w) / n,
    "is/out_of_band_frac": jnp.sum(((raw < low) | (raw > high)) * m) / n,
    "is/capped_frac": jnp.sum((raw > cap) * m) / n,
    "is/mismatch_kl": jnp.sum((gen_logp_BxT - old_logp_BxT) * m) / n,
  }
  return w, metrics


# ----------------------------------------------------------------------------- policy loss


def policy_loss(
  logp,
  old_logp,
  adv,
  mask,
  *,
  clip_low: float,
  clip_high: float,
  dual_clip: float | None = None,
  agg: str = "token-mean",
  is_weights=None,
  num_tokens=None,
  num_seqs=None,
  norm_const=None,
  seq_tokens=None,
  log_ratio_clamp: float = 20.0,
):
  """Token-level PPO-clip with decoupled ε (clip-higher) and optional dual-clip.

  ρ = exp(clamp(ℓθ − ℓold, ±log_ratio_clamp));
  L = max(−Aρ, −A·clip(ρ, 1−ε_low, 1+ε_high)); where A < 0 and c = dual_clip: L = min(L, −cA);
  L ← w·L with stop-gradient importance weights w; then aggregated by `agg`.
  Metrics are token means with the same denominator, so they too sum over micro-batches.
  Returns (loss, metrics).
  """
  m = mask.astype(jnp.float32)
  log_ratio = jnp.clip(logp - old_logp, -log_ratio_clamp, log_ratio_clamp)
  ratio = jnp.exp(log_ratio)
  pg1 = -adv * ratio
  pg2 = -adv * jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
  per_tok = jnp.maximum(pg1, pg2)
  dual_bites = jnp.zeros_like(per_tok, dtype=bool)
  if dual_clip:
    dual_bites = (adv < 0) & (per_tok > -dual_clip * adv)
    per_tok = jnp.where(adv < 0, jnp.minimum(per_tok, -dual_clip * adv), per_tok)
  if is_weights is not None:
    per_tok = per_tok * jax.lax.stop_gradient(is_weights)
  loss = aggregate(
    per_tok,
    m,
    agg,
    num_tokens=num_tokens,
    num_seqs=num_seqs,
    norm_const=norm_const,
    seq_tokens_BxT=seq_tokens,
  )
  tmean = lambda x: aggregate(x.astype(jnp.float32), m, "token-mean", num_tokens=num_tokens)  # noqa: E731
  metrics = {
    "actor/pg_loss": loss,
    "actor/clipfrac": tmean(pg2 > pg1),
    "actor/clipfrac_upper": tmean((adv > 0) & (ratio > 1.0 + clip_high)),
    "actor/clipfrac_lower": tmean((adv < 0) & (ratio < 1.0 - clip_low)),
    "actor/dual_clipfrac": tmean(dual_bites),
    "actor/ppo_kl": tmean(old_logp - logp),
    "actor/ratio_mean": tmean(ratio),
  }
  return loss, metrics


def rl_loss(
  logp,
  entropy,
  old_logp,
  ref_logp,
  adv,
  mask,
  *,
  clip_low,
  clip_high,
  dual_clip=None,
  agg="token-mean",
  is_weights=None,
  num_tokens=None,
  num_seqs=None,
  norm_const=None,
  seq_tokens=None,
  log_ratio_clamp=20.0,
  kl_kind="k2",
  kl_coef=0.0,
  kl_clamp=10.0,
  entropy_coef=0.0,
):
  """policy_loss + β·agg(KL to ref) − entropy_coef·agg(entropy), with the same aggregation."""
  agg_kw = dict(num_tokens=num_tokens, num_seqs=num_seqs, norm_const=norm_const)
  seq_kw = dict(seq_tokens_BxT=seq_tokens)
  loss, metrics = policy_loss(
    logp,
    old_logp,
    adv,
    mask,
    clip_low=clip_low,
    clip_high=clip_high,
    dual_clip=dual_clip,
    agg=agg,
    is_weights=is_weights,
    log_ratio_clamp=log_ratio_clamp,
    seq_tokens=seq_tokens,
    **agg_kw,
  )
  kl = aggregate(kl_penalty(logp, ref_logp, kl_kind, kl_clamp), mask, agg, **agg_kw, **seq_kw)
  ent = aggregate(entropy, mask, "token-mean", num_tokens=num_tokens)
  if kl_coef:
    loss = loss + kl_coef * kl
  if entropy_coef:
    loss = loss - entropy_coef * aggregate(entropy, mask, agg, **agg_kw, **seq_kw)
  metrics.update({"actor/kl_ref": kl, "actor/entropy": ent, "actor/loss": loss})
  return loss, metrics
