"""Segment attention: every implementation against attention run on each sequence alone."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prorl_jax.model import attention as A


def _packed(rng, b, t, h, k, dh, lengths_per_row):
  q = jnp.asarray(rng.normal(size=(b, t, h, dh)), jnp.float32)
  kk = jnp.asarray(rng.normal(size=(b, t, k, dh)), jnp.float32)
  v = jnp.asarray(rng.normal(size=(b, t, k, dh)), jnp.float32)
  seg = np.zeros((b, t), np.int32)
  for r, lens in enumerate(lengths_per_row):
    at = 0
    for i, n in enumerate(lens):
      seg[r, at : at + n] = i + 1
      at += n
  return q, kk, v, jnp.asarray(seg)


def _per_sequence(q, k, v, seg):
  """Each sequence through plain causal attention on its own (the independent reference)."""
  out = np.zeros(q.shape, np.float32)
  for r in range(q.shape[0]):
    for s in np.unique(np.asarray(seg[r])):
      if s == 0:
        continue
      idx = np.nonzero(np.asarray(seg[r]) == s)[0]
      n = len(idx)
      causal = jnp.tril(jnp.ones((n, n), bool))[None]
      o = A.dense_attention(q[r : r + 1, idx], k[r : r + 1, idx], v[r : r + 1, idx], causal)
      out[r, idx] = np.asarray(o[0])
  return out


LENGTHS = [[5, 17, 3, 30], [64], [1, 2, 40], []]


@pytest.mark.parametrize("chunk", [0, 16, 24])
def test_xla_segment_attention_is_per_sequence_attention(chunk):
  q, k, v, seg = _packed(np.random.default_rng(0), 4, 64, 4, 2, 8, LENGTHS)
  got = np.asarray(A.xla_segment_attention(q, k, v, seg, chunk))
  want = _per_sequence(q, k, v, seg)
  real = np.asarray(seg) > 0
  np.testing.assert_allclose(got[real], want[real], atol=2e-6)
  assert np.isfinite(got).all()  # padding rows stay finite


WINDOWED = [[5, 17, 3, 30, 9], [20, 20, 20, 4], [1, 2, 40, 11], [40, 30]]


@pytest.mark.parametrize("chunk, window", [(16, 40), (8, 40), (16, 64), (32, 70)])
def test_windowed_blocks_see_every_key_of_their_segments(chunk, window):
  # Rows of 70 (not a multiple of the chunk), no segment longer than 40: each query block
  # attends to the chunk + window keys that end with it, and nothing changes.
  q, k, v, seg = _packed(np.random.default_rng(4), 4, 70, 4, 2, 8, WINDOWED)
  got = np.asarray(A.xla_segment_attention(q, k, v, seg, chunk, window))
  want = _per_sequence(q, k, v, seg)
  real = np.asarray(seg) > 0
  np.testing.assert_allclose(got[real], want[real], atol=2e-6)
  assert np.isfinite(got).all()

  w = jnp.asarray(seg > 0, jnp.float32)[..., None, None]

  def loss(chunk, window):
    return lambda q, k, v: jnp.sum(
      jnp.sin(A.xla_segment_attention(q, k, v, seg, chunk, window)) * w
    )

  g0 = jax.grad(loss(0, 0), argnums=(0, 1, 2))(q, k, v)
  g1 = jax.grad(loss(chunk, window), argnums=(0, 1, 2))(q, k, v)
  for a, b in zip(g0, g1):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5)


def test_chunked_attention_gradients_match_one_block():
  q, k, v, seg = _packed(np.random.default_rng(1), 4, 64, 4, 2, 8, LENGTHS)
  w = jnp.asarray(seg > 0, jnp.float32)[..., None, None]

  def loss(chunk):
    return lambda q, k, v: jnp.sum(jnp.sin(A.xla_segment_attention(q, k, v, seg, chunk)) * w)

  g0 = jax.grad(loss(0), argnums=(0, 1, 2))(q, k, v)
  g1 = jax.grad(loss(16), argnums=(0, 1, 2))(q, k, v)
  for a, b in zip(g0, g1):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5)


def test_splash_attention_in_interpret_mode_matches_xla():
  # Pallas splash attention (the TPU kernel) run by the Pallas interpreter on the CPU.
  lengths = [[100, 28], [128], [7, 50, 60, 11]]
  q, k, v, seg = _packed(np.random.default_rng(2), 3, 128, 4, 2, 128, lengths)
  got = A.splash_segment_attention(q, k, v, seg, interpret=True, block=128)
  want = A.xla_segment_attention(q, k, v, seg, 0)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5)

  w = jnp.asarray(np.random.default_rng(3).normal(size=q.shape), jnp.float32)
  splash = lambda q, k, v: A.splash_segment_attention(q, k, v, seg, interpret=True, block=128)  # noqa: E731
  gs = jax.grad(lambda q, k, v: jnp.sum(splash(q, k, v) * w), argnums=(0, 1, 2))(q, k, v)
  gx = jax.grad(
    lambda q, k, v: jnp.sum(A.xla_segment_attention(q, k, v, seg, 0) * w), argnums=(0, 1, 2)
  )(q, k, v)
  for a, b in zip(gs, gx):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=5e-5)


def test_pallas_gpu_attention_in_interpret_mode_is_per_sequence_attention():
  """Pallas' GPU flash attention (the Triton kernel the packed passes run on NVIDIA GPUs), run
  by the Pallas interpreter on the CPU: values against each sequence alone, and values and
  gradients against the XLA blocks (windowed), over rows of 256 tokens (two kernel blocks)
  holding several sequences, one whole row and padding, with grouped-query heads."""
  lengths = [[100, 28, 90], [256], [7, 50, 60, 11, 3]]
  q, k, v, seg = _packed(np.random.default_rng(4), 3, 256, 4, 2, 32, lengths)
  kernel = lambda q, k, v: A.pallas_gpu_segment_attention(q, k, v, seg, interpret=True)  # noqa: E731
  blocks = lambda q, k, v: A.xla_segment_attention(q, k, v, seg, 64, 256)  # noqa: E731
  got = np.asarray(kernel(q, k, v))
  real = np.asarray(seg) > 0
  np.testing.assert_allclose(got[real], _per_sequence(q, k, v, seg)[real], atol=2e-5)
  np.testing.assert_allclose(got[real], np.asarray(blocks(q, k, v))[real], atol=2e-5)
  # what padding queries see differs (the window bounds sequences, not padding): it reaches
  # no loss, so the weights are zero there
  w = np.random.default_rng(5).normal(size=q.shape) * real[:, :, None, None]
  w = jnp.asarray(w, jnp.float32)
  loss = lambda fn: lambda q, k, v: jnp.sum(fn(q, k, v) * w)  # noqa: E731
  gk = jax.grad(loss(kernel), argnums=(0, 1, 2))(q, k, v)
  gx = jax.grad(loss(blocks), argnums=(0, 1, 2))(q, k, v)
  for a, b in zip(gk, gx):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=5e-5)
