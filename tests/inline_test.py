"""The trainer's inline engine (`rollout.engine=inline`) serves the exchange as a worker does:
for the same request, from the trainer's sharded float32 parameters, a worker's rows."""

import jax
import numpy as np
import pytest

from prorl_jax.demo import tiny_base
from prorl_jax.model import load_hf, load_tokenizer, save_hf
from prorl_jax.model.core import param_shardings
from prorl_jax.model.tokenizer import prompt_ids
from prorl_jax.parallel.sharding import make_mesh
from prorl_jax.records import Request
from prorl_jax.rewards.pool import VerifierPool
from prorl_jax.rollout import inline
from prorl_jax.rollout.engines.jax_engine import JaxEngine
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.rollout.worker import Worker
from tests.worker_test import _request


@pytest.fixture(scope="module")
def base(tmp_path_factory):
  return tiny_base.build(str(tmp_path_factory.mktemp("m") / "base"))


@pytest.fixture(scope="module")
def pool():
  p = VerifierPool(1)
  yield p
  p.close()


def _trainer_params(base, devices=4):
  """The trainer's view: float32 master params sharded over an fsdp mesh of `devices`."""
  model_cfg, params = load_hf(base, "float32", compute_dtype="bfloat16")
  mesh = make_mesh(1, devices, 1, jax.devices()[:devices])
  return model_cfg, jax.tree.map(jax.device_put, params, param_shardings(model_cfg, mesh))


@pytest.mark.parametrize(
  "batching, dtype, devices",
  # bfloat16 on one device: sharded, its sums round differently (log-probs ~4e-4 apart)
  [
    ("static", "float32", 4),
    pytest.param("continuous", "float32", 4, marks=pytest.mark.slow),  # the engines agree
    pytest.param("static", "bfloat16", 1, marks=pytest.mark.slow),  # (paged_engine_test)
  ],
)
def test_inline_rows_equal_a_workers_rows_for_the_same_request(
  tmp_path, base, pool, batching, dtype, devices
):
  model_cfg, params = _trainer_params(base, devices)
  assert (
    len(jax.tree.leaves(params)[0].sharding.device_set) == devices
  )  # sharded, not on one device
  leaves = [np.asarray(x) for x in jax.tree.leaves(params)]
  rounded = [x.astype(jax.numpy.bfloat16).astype(np.float32) for x in leaves]
  assert not all(map(np.array_equal, leaves, rounded))  # bfloat16 files differ from the params
  ex = Exchange(f"file://{tmp_path}/ex")
  # the version as the trainer publishes it for workers: bfloat16 files
  save_hf(model_cfg, params, str(tmp_path / "v0"), tokenizer_dir=base, dtype="bfloat16")
  ex.weights.publish(0, step=0, src_dir=str(tmp_path / "v0"))
  tok = load_tokenizer(base)
  worker_rid, _ = _request(ex, tok, "a-worker")
  inline_rid, _ = _request(ex, tok, "b-inline")
  opts = {"batching": batching, "slots": 5, "page_size": 4, "steps_per_sync": 3, "dtype": dtype}

  worker = Worker(ex, JaxEngine(**opts), str(tmp_path / "cache"), "w", 0.0, pool)
  worker.run(max_requests=1)  # claims the first request by id
  assert worker.engine.model_cfg == inline.worker_config(
    model_cfg, dtype
  )  # the model a worker reads back

  own = inline.InlineWorker(ex, JaxEngine(**opts), base, model_cfg, "bfloat16", pool)
  assert not own.serve()  # no version offered yet: nothing claimed
  own.offer(0, params)
  assert own.serve() and not own.serve()  # one request left for it, then none
  a, b = ex.results.read(worker_rid), ex.results.read(inline_rid)
  assert (a.worker, b.worker, b.policy_version) == ("w", "inline", 0)
  x, y = a.arrays(), b.arrays()
  assert len(set(x["lengths"].tolist())) > 1  # ragged rows
  for key in ("tokens", "lengths", "scores", "verifier_failed"):
    np.testing.assert_array_equal(x[key], y[key], err_msg=key)
  np.testing.assert_allclose(x["logprobs"], y["logprobs"], atol=2e-5)
  assert jax.tree.leaves(own.engine.params)[0].dtype == jax.numpy.dtype(dtype)


def test_the_inline_worker_takes_only_requests_its_version_may_serve(tmp_path, base, pool):
  model_cfg, params = _trainer_params(base, devices=1)
  ex = Exchange(f"file://{tmp_path}/ex")
  tok = load_tokenizer(base)
  later, _ = _request(ex, tok, "a-needs-v1", min_version=1)
  old = ex.queue.put(
    Request.from_json(
      {
        "prompts": [prompt_ids(tok, "1+1")],
        "n": 2,
        "seed": 1,
        "sampling": {"max_new_tokens": 4},
        "min_version": 0,
        "max_version": 0,
        "meta": [{"data_source": "chain_sum", "reference": "2"}],
      }
    ),
    request_id="b-only-v0",
  )
  own = inline.InlineWorker(ex, JaxEngine(), base, model_cfg, "float32", pool)
  own.offer(0, params)
  assert own.serve()  # the v0 request, past the one it cannot serve
  assert ex.results.committed(old) and not ex.results.committed(later)
  assert ex.queue._lease(later)[0] is None  # not even leased: another worker may take it
  own.offer(1, params)
  assert own.serve() and ex.results.committed(later)
  assert ex.results.read(later).policy_version == 1


def test_the_inline_worker_samples_with_the_newest_version_offered(tmp_path, base, pool):
  """Offered v0, then v1 with other weights, the same request is answered as v1 alone answers
  it: an engine stuck on its first weights gives v0's rows again (and fails here)."""
  model_cfg, p0 = _trainer_params(base, devices=1)
  p1 = jax.tree.map(lambda x: x * 1.5, p0)  # another policy: other tokens, other log-probs
  ex = Exchange(f"file://{tmp_path}/ex")
  tok = load_tokenizer(base)
  first, _ = _request(ex, tok, "a-first")
  own = inline.InlineWorker(ex, JaxEngine(), base, model_cfg, "float32", pool)
  own.offer(0, p0)
  assert own.serve()
  second, _ = _request(ex, tok, "b-second", min_version=1)  # the same prompts and seed
  own.offer(1, p1)
  assert own.serve()
  alone_ex = Exchange(f"file://{tmp_path}/alone")
  alone_rid, _ = _request(alone_ex, tok, "c-alone")
  alone = inline.InlineWorker(alone_ex, JaxEngine(), base, model_cfg, "float32", pool)
  alone.offer(1, p1)
  assert alone.serve()
  v0, v1 = ex.results.read(first).arrays(), ex.results.read(second).arrays()
  want = alone_ex.results.read(alone_rid).arrays()
  assert ex.results.read(second).policy_version == 1
  assert not np.allclose(v0["logprobs"], v1["logprobs"])  # the two versions differ here
  np.testing.assert_array_equal(v1["tokens"], want["tokens"])
  np.testing.assert_allclose(v1["logprobs"], want["logprobs"], atol=1e-6)


def test_a_stop_asked_mid_request_abandons_it_between_chunks(tmp_path, base, pool):
  # The trainer's stop check runs between the continuous engine's device calls: a stop asked
  # while a request generates abandons it there (no result), not after the whole request.
  model_cfg, params = _trainer_params(base, devices=1)
  ex = Exchange(f"file://{tmp_path}/ex")
  rid, _ = _request(ex, load_tokenizer(base), "r")
  engine = JaxEngine(batching="continuous", slots=2, page_size=4, steps_per_sync=2)
  own = inline.InlineWorker(ex, engine, base, model_cfg, "float32", pool)
  own.offer(0, params)
  calls = []

  class Stop(Exception):
    pass

  def interrupt():
    calls.append(1)
    if len(calls) == 3:
      raise Stop

  own.interrupt = interrupt
  with pytest.raises(Stop):
    own.serve()
  assert len(calls) == 3 and not ex.results.committed(rid)
  assert engine.inflight_updates and not own.inflight_updates  # no weight swaps meanwhile
  own.interrupt = None
  assert own.serve() and ex.results.committed(rid)  # redone whole once asked again
