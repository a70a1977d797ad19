"""The continuous-batching engine over a paged KV cache (`rollout/engines/paged.py`): page
accounting by hand, greedy and sampled outputs equal to the static sampler's, and a sequence's
tokens independent of its slot, its batch and whether its prompt's pages were shared."""

import jax
import numpy as np
import pytest

from prorl_jax.model import init_params, presets
from prorl_jax.records import SamplingParams
from prorl_jax.rollout.engines import jax_sampler
from prorl_jax.rollout.engines.paged import PagedConfig, PagedEngine
from prorl_jax.rollout.engines.slots import PagePool


@pytest.fixture(scope="module")
def model():
  model_cfg = presets.tiny(vocab_size=64)
  return model_cfg, init_params(model_cfg, jax.random.PRNGKey(0))


def _prompts(k, seed=0, lo=3, hi=40):
  rng = np.random.RandomState(seed)
  return [[int(t) for t in rng.randint(1, 64, size=rng.randint(lo, hi))] for _ in range(k)]


def test_page_pool_by_hand():
  pool = PagePool(4)  # page 0 is the trash page: three to hand out
  a, b = pool.take(), pool.take()
  assert (a, b) == (1, 2) and pool.in_use == 2
  pool.share(a)  # a second sequence holds page 1
  pool.release(a)
  assert pool.in_use == 2  # still held once
  pool.release(a)
  assert pool.in_use == 1 and pool.take() == 1  # free again, handed out again
  pool.take()
  with pytest.raises(MemoryError, match="page pool is exhausted"):
    pool.take()
  assert pool.peak == 3


def test_slot_reuse_and_shared_prompt_pages_by_hand(model):
  model_cfg, params = model
  eng = PagedEngine(model_cfg, params, PagedConfig(slots=1, page_size=4, steps_per_sync=1))
  sp = SamplingParams(max_new_tokens=3, temperature=0.0)
  out = eng.generate([[5, 6, 7, 8, 9]], 2, sp, seed=0)
  # prompt of 5 tokens: pages 1 (full) and 2 (partial); each sample shares page 1 and gets its
  # own copy of page 2 (pages 3 and 4): 4 at the peak, then page 2 goes back. One slot: sample 1
  # waits for sample 0 to finish (3 tokens: the first at prefill, two decode steps), whose copy
  # is freed at once; its own decode then needs no new page (positions 5, 6 fit page 4).
  assert eng.stats.peak_pages == 4
  assert eng.stats.decode_steps == 4  # 2 per sample, one after the other in the one slot
  assert eng.pool.in_use == 0  # every page back in the pool
  assert out.lengths.tolist() == [3, 3]
  np.testing.assert_array_equal(out.tokens[0], out.tokens[1])  # greedy: the same twice


def test_greedy_equals_the_static_sampler_over_ragged_lengths(model):
  model_cfg, params = model
  prompts = _prompts(6)
  rows = [p for p in prompts for _ in range(2)]
  base = SamplingParams(max_new_tokens=20, temperature=0.0)
  first = jax_sampler.generate(model_cfg, params, rows, base, seed=0).tokens[:, 0]
  # stop on a token some rows emit first and others never: ragged lengths
  sp = SamplingParams(max_new_tokens=20, temperature=0.0, stop_token_ids=(int(first[0]),))
  want = jax_sampler.generate(model_cfg, params, rows, sp, seed=0)
  eng = PagedEngine(model_cfg, params, PagedConfig(slots=3, page_size=8, steps_per_sync=4))
  got = eng.generate(prompts, 2, sp, seed=0)
  assert len(set(want.lengths.tolist())) > 1  # ragged
  np.testing.assert_array_equal(got.lengths, want.lengths)
  np.testing.assert_array_equal(got.tokens, want.tokens)
  np.testing.assert_allclose(got.logprobs, want.logprobs, atol=2e-5)
  assert got.stopped.tolist() == want.stopped.tolist()


SAMPLED = SamplingParams(max_new_tokens=16, temperature=1.0, top_p=0.95, stop_token_ids=(3,))


def test_a_sequences_tokens_do_not_depend_on_its_batching(model):
  model_cfg, params = model
  prompts = _prompts(5, seed=1)
  a = PagedEngine(model_cfg, params, PagedConfig(slots=4, page_size=8, steps_per_sync=4))
  b = PagedEngine(model_cfg, params, PagedConfig(slots=2, page_size=4, steps_per_sync=3))
  got_a = a.generate(prompts, 3, SAMPLED, seed=7)
  got_b = b.generate(prompts, 3, SAMPLED, seed=7)
  assert len(set(map(tuple, got_a.tokens.tolist()))) > 5  # varied samples, not one repeated
  np.testing.assert_array_equal(got_a.tokens, got_b.tokens)
  np.testing.assert_array_equal(got_a.lengths, got_b.lengths)
  np.testing.assert_allclose(got_a.logprobs, got_b.logprobs, atol=2e-5)
  other = a.generate(prompts, 3, SAMPLED, seed=8)
  assert not np.array_equal(other.tokens, got_a.tokens)  # the seed matters


def test_sampled_outputs_equal_the_static_samplers_for_the_same_seed(model):
  model_cfg, params = model
  prompts = _prompts(5, seed=5)
  rows = [p for p in prompts for _ in range(3)]
  want = jax_sampler.generate(model_cfg, params, rows, SAMPLED, seed=11)
  eng = PagedEngine(model_cfg, params, PagedConfig(slots=4, page_size=8, steps_per_sync=4))
  got = eng.generate(prompts, 3, SAMPLED, seed=11)
  assert len(set(map(tuple, want.tokens.tolist()))) > 10  # sampled, varied
  assert len(set(want.lengths.tolist())) > 1  # some stop early: ragged
  np.testing.assert_array_equal(got.tokens, want.tokens)
  np.testing.assert_array_equal(got.lengths, want.lengths)
  np.testing.assert_allclose(got.logprobs, want.logprobs, atol=2e-5)
  assert got.stopped.tolist() == want.stopped.tolist()


def test_shared_prompt_pages_equal_separate_prefills(model):
  model_cfg, params = model
  (p,) = _prompts(1, seed=2, lo=13, hi=14)  # 13 tokens: a partial last page of 8
  eng = PagedEngine(model_cfg, params, PagedConfig(slots=3, page_size=8, steps_per_sync=2))
  shared = eng.generate([p], 3, SAMPLED, seed=3)  # one prefill, its pages shared
  peak_shared = eng.stats.peak_pages
  separate = eng.generate([p, p, p], 1, SAMPLED, seed=3)  # three prefills, same sequence ids
  np.testing.assert_array_equal(shared.tokens, separate.tokens)
  np.testing.assert_allclose(shared.logprobs, separate.logprobs, atol=2e-5)
  assert peak_shared < eng.stats.peak_pages  # and fewer pages


def test_per_row_token_limits_agree_with_the_static_sampler(model):
  model_cfg, params = model
  prompts = _prompts(3, seed=4)
  caps = np.array([1, 5, 12, 2, 7, 3])  # per row, prompt-major (n = 2)
  sp = SamplingParams(max_new_tokens=10, temperature=0.0)
  rows = [p for p in prompts for _ in range(2)]
  want = jax_sampler.generate(model_cfg, params, rows, sp, seed=0, max_new=caps)
  eng = PagedEngine(model_cfg, params, PagedConfig(slots=2, page_size=8, steps_per_sync=4))
  got = eng.generate(prompts, 2, sp, seed=0, max_new=caps)
  assert want.lengths.tolist() == [1, 5, 10, 2, 7, 3]  # a cap past max_new_tokens: that
  np.testing.assert_array_equal(got.lengths, want.lengths)
  np.testing.assert_array_equal(got.tokens, want.tokens)
  assert got.stopped.tolist() == [False] * 6


def test_an_in_flight_weight_update_keeps_live_sequences_and_records_each_tokens_version(model):
  model_cfg, params_a = model
  params_b = jax.tree.map(lambda x: x * 1.5, init_params(model_cfg, jax.random.PRNGKey(9)))
  prompts = _prompts(4, seed=6)
  sp = SamplingParams(max_new_tokens=12, temperature=0.0)
  pc = PagedConfig(slots=3, page_size=4, steps_per_sync=3)
  ref_a = PagedEngine(model_cfg, params_a, pc).generate(prompts, 2, sp, seed=0)
  ref_b = PagedEngine(model_cfg, params_b, pc).generate(prompts, 2, sp, seed=0)
  calls = []

  def between_chunks():  # version 1 arrives after the first device call
    calls.append(1)
    return (1, params_b) if len(calls) == 2 else None

  eng = PagedEngine(model_cfg, params_a, pc)
  got = eng.generate(prompts, 2, sp, seed=0, between_chunks=between_chunks)
  assert eng.stats.weight_swaps == 1 and eng.params is params_b
  kinds = set()
  for r, n in enumerate(got.lengths):
    v = got.versions[r, :n]
    assert set(v.tolist()) <= {0, 1} and np.all(np.diff(v) >= 0)  # old tokens, then new
    assert np.all(got.versions[r, n:] == -1)
    old = int(np.sum(v == 0))
    # the tokens drawn before the update are the old weights' own
    np.testing.assert_array_equal(got.tokens[r, :old], ref_a.tokens[r, :old])
    if old == n:
      kinds.add("old")
      np.testing.assert_array_equal(got.tokens[r, :n], ref_a.tokens[r, :n])
    elif old == 0:  # admitted after the update: the new weights' sequence, token for token
      kinds.add("new")
      np.testing.assert_array_equal(got.tokens[r], ref_b.tokens[r])
      np.testing.assert_allclose(got.logprobs[r], ref_b.logprobs[r], atol=2e-5)
    else:
      kinds.add("spans the update")
  assert kinds == {"old", "new", "spans the update"} or kinds == {"new", "spans the update"}
  assert "spans the update" in kinds  # a live sequence continued through the swap


@pytest.mark.slow  # ~1 min: the kernel runs in Pallas' interpreter
def test_the_pallas_paged_attention_kernel_returns_the_xla_paths_rows(model):
  # JAX's Pallas paged-attention kernel (the GPU one, in Pallas' interpreter on the CPU) behind
  # the same engine, its pages in the kernels' [K, P, page, Dh] layout: the same sampled rows
  # as the XLA path, over ragged lengths, shared prompt pages and slot reuse.
  model_cfg, params = model
  prompts = _prompts(5, seed=5)
  shape = dict(slots=4, page_size=4, steps_per_sync=4)
  want = PagedEngine(model_cfg, params, PagedConfig(**shape)).generate(prompts, 3, SAMPLED, seed=11)
  eng = PagedEngine(model_cfg, params, PagedConfig(**shape, attention="pallas_interpret"))
  got = eng.generate(prompts, 3, SAMPLED, seed=11)
  assert len(set(want.lengths.tolist())) > 1  # ragged
  assert eng.stats.peak_pages > 0 and eng.pool.in_use == 0
  np.testing.assert_array_equal(got.tokens, want.tokens)
  np.testing.assert_array_equal(got.lengths, want.lengths)
  np.testing.assert_allclose(got.logprobs, want.logprobs, atol=2e-5)


def test_auto_attention_takes_the_pallas_kernel_only_on_an_accelerator_where_it_fits():
  from prorl_jax.rollout.engines.paged_kernels import choose_attention

  assert choose_attention("auto", 128, 16, "cpu") == "xla"
  assert choose_attention("auto", 128, 16, "tpu") == "pallas"
  assert choose_attention("auto", 64, 16, "tpu") == "xla"  # the TPU kernel's lanes: 128
  assert choose_attention("auto", 64, 16, "gpu") == "pallas"
  assert choose_attention("auto", 128, 8, "gpu") == "xla"  # pages of fewer than 16 tokens
  assert choose_attention("xla", 128, 16, "tpu") == "xla"  # asked for: as asked


@pytest.mark.parametrize("kernel", ["tpu", "gpu"])
def test_each_paged_kernel_auto_can_pick_executes_and_equals_the_xla_path(kernel):
  # The kernels `auto` picks on a TPU (head_dim 128) and on a GPU, run by Pallas' interpreters
  # on the CPU on small shapes, against the XLA path: ragged lengths, an idle slot, pages out of
  # order, two query heads per kv head.
  from jax.experimental.pallas import tpu as pltpu

  from prorl_jax.rollout.engines import paged_kernels as pk

  s, k, g, dh, page, pages, width = 3, 2, 2, 128, 16, 12, 4
  keys = jax.random.split(jax.random.PRNGKey(3), 3)
  # values a bfloat16 holds: the TPU kernel's matmuls take bfloat16 operands (TPU precision),
  # as a TPU engine's pages are
  bf16 = lambda x: x.astype(jax.numpy.bfloat16).astype(jax.numpy.float32)
  q = bf16(jax.random.normal(keys[0], (s, k, g, dh), jax.numpy.float32))
  kp = bf16(jax.random.normal(keys[1], (k, pages, page, dh), jax.numpy.float32))
  vp = bf16(jax.random.normal(keys[2], (k, pages, page, dh), jax.numpy.float32))
  table = jax.numpy.array([[5, 2, 9, 1], [3, 7, 0, 0], [4, 0, 0, 0]], jax.numpy.int32)
  pos = jax.numpy.array([50, 20, 0], jax.numpy.int32)
  active = jax.numpy.array([True, True, False])
  # the XLA path's layout: keys [P, K, Dh, page], values [P, K, page, Dh]
  want = pk.flash_pages(q, kp.transpose(1, 0, 3, 2), vp.transpose(1, 0, 2, 3), table, pos, active)
  if kernel == "tpu":
    with pltpu.force_tpu_interpret_mode():
      got = pk.pallas_pages(q, kp, vp, table, pos, active, kernel="tpu")
  else:
    got = pk.pallas_pages(q, kp, vp, table, pos, active, interpret=True, kernel="gpu")
  assert table.shape[1] == width
  np.testing.assert_allclose(np.asarray(got)[:2], np.asarray(want)[:2], atol=2e-6)
