"""Resume over a real exchange: whatever state an interrupted run left its requests in, and
wherever between two storage writes it was cut, the resumed trainer's requests end pending or
with their results (put again with the same id and body), and nothing else is left."""

import itertools

import numpy as np
import pytest

from prorl_jax import config as config_lib
from prorl_jax.records import Prefetch, Request, Result
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.rollout.queue import LostRequest, wait_for_results
from prorl_jax.trainer import run_dir
from prorl_jax.trainer.loop_state import LoopState


class Killed(BaseException):
  """kill -9 between two storage writes (BaseException: no `except Exception` swallows it)."""


def _body(i: int) -> Request:
  return Request.from_json(
    {
      "prompts": [[i + 1, 7]],
      "n": 2,
      "sampling": {"max_new_tokens": 3},
      "meta": [{"data_source": "chain_sum"}],
      "seed": 1000 + i,
    }
  )


def _arrays(mark: float) -> dict:
  return {
    "tokens": np.full((2, 3), 5, np.int32),
    "logprobs": np.full((2, 3), -0.5, np.float32),
    "lengths": np.full(2, 3, np.int32),
    "stopped": np.ones(2, bool),
    "scores": np.array([mark, 0.0], np.float32),
    "verifier_failed": np.zeros(2, bool),
  }


def _serve(ex: Exchange, mark: float = 1.0) -> list[str]:
  """A worker serving every open request once (synchronously); the ids it served."""
  served = []
  while (claim := ex.queue.claim("w0")) is not None:
    ex.queue.commit(claim, Result(**_arrays(mark), policy_version=0))
    served.append(claim.request_id)
  return served


def _cut_after(ex: Exchange, k: int):
  """The store's k-th mutation (write, delete, range delete) raises Killed instead of running."""
  store, done = ex.store, {"n": 0}
  write, delete_prefix = store.write, store.delete_prefix

  def counted(fn):
    def run(*a, **kw):
      if done["n"] == k:
        raise Killed
      done["n"] += 1
      return fn(*a, **kw)

    return run

  store.write, store.delete_prefix = counted(write), counted(delete_prefix)
  return lambda: setattr(store, "write", write) or setattr(store, "delete_prefix", delete_prefix)


def _resume_and_finish(url: str, expected: dict) -> tuple[dict, Exchange]:
  """A fresh trainer process on `url`: reconcile with `expected`, a worker serves, the wait
  (without the record: nothing may depend on re-putting) gets every result; then retired."""
  ex = Exchange(url)
  ex.queue.reconcile(expected)
  assert ex.queue.known_ids() <= set(expected)
  assert sorted(ex.queue.ids()) == sorted(expected)
  _serve(ex, mark=0.0)  # a worker of the resumed run
  done = wait_for_results(ex.queue, list(expected), timeout_s=5.0, what="the resumed step")
  for rid in done:
    ex.queue.retire(rid)
  assert ex.queue.known_ids() == set()
  return done, ex


STATES = list(itertools.product([False, True], repeat=4))  # put, claimed, committed, retired


@pytest.mark.parametrize("put,claimed,committed,retired", STATES)
def test_reconcile_leaves_exactly_the_checkpoints_requests(
  tmp_path, put, claimed, committed, retired
):
  """One request of the checkpoint's prefetch record and one leftover that the checkpoint does
  not know, each in the same state: the record's ends pending (or with its verified result),
  the leftover is gone; a committed result of the same body is kept, not generated again."""
  url = f"file://{tmp_path}/exchange"
  ex = Exchange(url)
  expected = {"s0000004-p-c00000": _body(0)}
  for rid, body in [*expected.items(), ("s0000005-g00-c00000", _body(1))]:
    if put:
      ex.queue.put(body, request_id=rid)
    if put and claimed:
      claim = ex.queue.claim("old", skip=set(ex.queue.ids()) - {rid})
      assert claim is not None and claim.request_id == rid
      if committed:
        assert ex.queue.commit(claim, Result(**_arrays(1.0), policy_version=0))
    if retired:
      ex.queue.retire(rid)
  before = ex.queue.known_ids()
  assert ("s0000005-g00-c00000" in before) == (put and not retired)
  counts = Exchange(url).queue.reconcile(expected)
  kept = put and claimed and committed and not retired
  assert counts == {
    "kept": int(kept),
    "pending": int(not kept),
    "put": int(not (put and not retired)),
    "retired": int(put and not retired),
  }
  done, _ = _resume_and_finish(url, expected)
  # the old run's result (score 1) is used when it was committed and not retired
  assert done["s0000004-p-c00000"].scores[0] == (1.0 if kept else 0.0)


def test_a_request_of_another_body_under_the_same_id_is_replaced(tmp_path):
  url = f"file://{tmp_path}/exchange"
  ex = Exchange(url)
  ex.queue.put(_body(5), request_id="s0000004-p-c00000")
  claim = ex.queue.claim("old")
  ex.queue.commit(claim, Result(**_arrays(1.0), policy_version=0))
  counts = ex.queue.reconcile({"s0000004-p-c00000": _body(0)})
  assert counts["put"] == 1 and counts["pending"] == 1
  assert ex.queue.load("s0000004-p-c00000").seed == 1000


def test_torn_request_and_torn_result_are_made_again(tmp_path):
  url = f"file://{tmp_path}/exchange"
  ex = Exchange(url)
  a, b = "s0000004-p-c00000", "s0000004-p-c00008"
  for rid, i in ((a, 0), (b, 1)):
    ex.queue.put(_body(i), request_id=rid)
  claim = ex.queue.claim("old", skip={a})
  ex.queue.commit(claim, Result(**_arrays(1.0), policy_version=0))
  raw, _ = ex.store.read(f"requests/{a}.json")
  ex.store.write(f"requests/{a}.json", raw[: len(raw) // 2])  # torn request
  (data_key,) = [k for k in ex.store.list(f"results/{b}/") if k.endswith(".npz")]
  blob, _ = ex.store.read(data_key)
  ex.store.write(data_key, blob[:-10])  # torn result data
  counts = Exchange(url).queue.reconcile({a: _body(0), b: _body(1)})
  assert counts == {"kept": 0, "pending": 2, "put": 1, "retired": 0}
  done, _ = _resume_and_finish(url, {a: _body(0), b: _body(1)})
  assert sorted(done) == [a, b]


def test_the_wait_puts_a_torn_request_again_from_the_record_or_names_it(tmp_path):
  ex = Exchange(f"file://{tmp_path}/exchange")
  rid = "s0000004-g00-c00000"
  ex.queue.put(_body(0), request_id=rid)
  raw, _ = ex.store.read(f"requests/{rid}.json")
  ex.store.write(f"requests/{rid}.json", raw[:20])
  with pytest.raises(LostRequest, match=rid):
    wait_for_results(ex.queue, [rid], timeout_s=30.0, what="step 4")
  ex.store.write(f"requests/{rid}.json", raw[:20])

  def serve():
    _serve(ex)
    return ""

  done = wait_for_results(
    ex.queue, [rid], timeout_s=30.0, what="step 4", on_idle=serve, requests={rid: _body(0)}
  )
  assert list(done) == [rid] and ex.stats["reput"] == 1


def test_the_window_that_lost_a_prefetched_request_is_closed(tmp_path):
  """A trainer killed inside retire() after the request file and the result data were deleted,
  before the manifest: the resumed run (from the checkpoint whose prefetch record names that
  request) puts it again and gets its result; it used to wait for it until the timeout."""
  cfg = config_lib.base_config()
  cfg.run_dir = str(tmp_path / "run")
  cfg.rollout.exchange = url = f"file://{tmp_path}/exchange"
  ex = Exchange(url)
  src = tmp_path / "w"
  src.mkdir()
  (src / "model.safetensors").write_bytes(b"weights")
  for v in range(4):
    ex.weights.publish(v, step=v, src_dir=str(src))
  record = {f"s0000004-p-c{8 * i:05d}": _body(i) for i in range(4)}
  for rid, body in record.items():
    ex.queue.put(body, request_id=rid)
  _serve(ex)
  lost = "s0000004-p-c00016"
  ex.store.write(f"requests/{lost}.json", None)
  for k in ex.store.list(f"results/{lost}/"):
    if k.endswith(".npz"):
      ex.store.write(k, None)  # the manifest is left: a result whose data and request are gone
  pf = Prefetch(step=4, version=2, rounds=1, requests=record)
  loop = LoopState(step=3, version=3, prefetch=pf)
  resumed = run_dir.open_exchange(run_dir.exchange_url(cfg.rollout.exchange, cfg.run_dir), loop)
  _serve(resumed)
  done = wait_for_results(resumed.queue, list(record), timeout_s=10.0, what="step 4")
  assert sorted(done) == sorted(record)


OPS = ["put", "commit", "retire"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("in_record", [True, False], ids=["in_record", "leftover"])
def test_a_cut_between_any_two_storage_writes_resumes(tmp_path, op, in_record):
  """The trainer (put, retire) or a worker (commit) killed before each of its operation's storage
  writes in turn: the resumed run ends with exactly its record's results, whether or not the
  checkpoint's record names the request that was cut."""
  rid = "s0000004-p-c00000"
  other = "s0000004-p-c00008"
  cuts = 0
  for k in itertools.count():
    url = f"file://{tmp_path}/ex{k}"
    ex = Exchange(url)
    ex.queue.put(_body(1), request_id=other)  # a neighbour, always in the record
    if op != "put":
      ex.queue.put(_body(0), request_id=rid)
    if op == "retire":
      _serve(ex)
    claim = ex.queue.claim("old", skip={other}) if op == "commit" else None
    restore = _cut_after(ex, k)
    try:
      if op == "put":
        ex.queue.put(_body(0), request_id=rid)
      elif op == "commit":
        ex.queue.commit(claim, Result(**_arrays(1.0), policy_version=0))
      else:
        ex.queue.retire(rid)
      finished = True
    except Killed:
      finished = False
    restore()
    expected = {other: _body(1), **({rid: _body(0)} if in_record else {})}
    done, _ = _resume_and_finish(url, expected)
    assert sorted(done) == sorted(expected)
    if finished:
      break
    cuts += 1
  # every write of the operation was cut (retire: request, lease, manifest, the data's prefix
  # and the one key under it)
  assert cuts == {"put": 1, "commit": 4, "retire": 5}[op]
