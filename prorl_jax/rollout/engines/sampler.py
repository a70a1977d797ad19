"""Drawing tokens, shared by every JAX engine: top-k and nucleus filtering, one categorical
draw per row from a uniform keyed by (seed, sequence, position) only, so the static sampler and
the paged engine draw the same sequence from the same seed (`stream_uniforms`), and
`sample_rows`, a row's token and its log-prob under the sampling distribution.

Legend: B rows, V vocab.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry2x32_p

from prorl_jax.records import SamplingParams


def filter_logits(logits_BxV, top_k: int, top_p: float):
  """Masks logits outside the top-k / nucleus (top-p) set to -inf; the best token always stays."""
  if top_k > 0:
    kth = jax.lax.top_k(logits_BxV, top_k)[0][:, -1:]
    logits_BxV = jnp.where(logits_BxV < kth, -jnp.inf, logits_BxV)
  if top_p < 1.0:
    order = jnp.argsort(-logits_BxV, axis=-1)
    sorted_l = jnp.take_along_axis(logits_BxV, order, axis=-1)
    probs = jax.nn.softmax(sorted_l, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs  # mass of the strictly better tokens
    drop_sorted = before >= top_p
    drop = (
      jnp.zeros_like(drop_sorted).at[jnp.arange(order.shape[0])[:, None], order].set(drop_sorted)
    )
    logits_BxV = jnp.where(drop, -jnp.inf, logits_BxV)
  return logits_BxV


def _first_argmax(z_BxV):
  """argmax as two plain reductions (XLA:CPU runs the fused value+index reduce ~10x slower)."""
  m_B = jnp.max(z_BxV, axis=-1)
  iota = jax.lax.broadcasted_iota(jnp.int32, z_BxV.shape, 1)
  return jnp.min(jnp.where(z_BxV == m_B[:, None], iota, z_BxV.shape[-1]), axis=-1), m_B


_CHUNK = 128


def stream_uniforms(seed_key, seq_B, t_B):
  """The uniform in [0, 1) of draw t of sequence j, for each (seq_B[i], t_B[i]): a function of
  (seed, j, t) only — not of the batch, the slot or the token limit — so every engine draws the
  same sequence from the same seed.

  It is `jax.random.uniform(jax.random.split(seed_key, T)[t], (B,))[j]` for any T > t and B > j
  (threefry with `jax_threefry_partitionable`, the default: counters are indices), computed at
  (j, t) directly so rows at different positions draw in one call (tested against that form).
  """
  k = seed_key  # a raw threefry key, uint32[2] (`jax.random.PRNGKey(seed)`)
  zero = jnp.zeros_like(t_B, jnp.uint32)
  step = threefry2x32_p.bind(k[0], k[1], zero, t_B.astype(jnp.uint32))  # split(key)[t]
  b1, b2 = threefry2x32_p.bind(step[0], step[1], zero, seq_B.astype(jnp.uint32))
  mantissa = jax.lax.shift_right_logical(b1 ^ b2, jnp.uint32(32 - 23))  # as jax.random.uniform
  one = jnp.uint32(np.array(1.0, np.float32).view(np.uint32))
  return jax.lax.bitcast_convert_type(mantissa | one, jnp.float32) - 1.0


def draw_from_uniform(z_BxV, u01_B):
  """One categorical draw per row from softmax(z) (-inf = excluded) with the row's uniform in
  [0, 1): the row's cumulative mass is searched in two levels (chunk sums, then within the
  chunk), so a draw costs an exp and two small scans, not V Gumbel variates and a fused argmax.

  Returns (token, log-prob of the token under softmax(z)).
  """
  b, v = z_BxV.shape
  m_Bx1 = jnp.max(z_BxV, axis=-1, keepdims=True)
  e_BxV = jnp.exp(z_BxV - m_Bx1)
  pad = -v % _CHUNK
  e_BxCxW = jnp.pad(e_BxV, ((0, 0), (0, pad))).reshape(b, -1, _CHUNK)
  chunk_BxC = jnp.sum(e_BxCxW, axis=-1)
  cum_BxC = jnp.cumsum(chunk_BxC, axis=-1)
  total_B = cum_BxC[:, -1]
  u_B = u01_B * total_B

  def pick(cum, mass, target):
    """First index whose cumulative mass exceeds `target`, kept among the indices with mass
    (float rounding at either end must not land on an excluded token)."""
    iota = jax.lax.broadcasted_iota(jnp.int32, mass.shape, 1)
    first = jnp.min(jnp.where(mass > 0, iota, mass.shape[1]), axis=-1)
    last = jnp.max(jnp.where(mass > 0, iota, 0), axis=-1)
    return jnp.clip(jnp.sum(cum <= target[:, None], axis=-1), first, last)

  c_B = pick(cum_BxC, chunk_BxC, u_B)
  row_BxW = jnp.take_along_axis(e_BxCxW, c_B[:, None, None], axis=1)[:, 0]
  before_B = jnp.take_along_axis(cum_BxC - chunk_BxC, c_B[:, None], axis=-1)[:, 0]
  w_B = pick(jnp.cumsum(row_BxW, axis=-1), row_BxW, u_B - before_B)
  tok_B = c_B * _CHUNK + w_B
  lp_B = jnp.take_along_axis(z_BxV, tok_B[:, None], axis=-1)[:, 0] - m_Bx1[:, 0] - jnp.log(total_B)
  return tok_B, lp_B


def sample_rows(logits_BxV, seed_key, seq_B, t_B, sp: SamplingParams):
  """(token, log-prob under the sampling distribution) per row; row i is draw t_B[i] of
  sequence seq_B[i] (`stream_uniforms`)."""
  z = logits_BxV.astype(jnp.float32)
  if sp.temperature == 0.0:
    tok, m = _first_argmax(z)
    lp = -jnp.log(jnp.sum(jnp.exp(z - m[:, None]), axis=-1))  # log_softmax(z) at the argmax
  else:
    u_B = stream_uniforms(seed_key, seq_B, t_B)
    tok, lp = draw_from_uniform(filter_logits(z / sp.temperature, sp.top_k, sp.top_p), u_B)
  return tok.astype(jnp.int32), lp
