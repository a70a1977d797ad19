"""`collect.collect` without a model: a real exchange, and a thread that answers requests as a
worker would, with scores chosen by the prompt (even first token: one right of two, odd: both)."""

import threading

import numpy as np

from prorl_jax import config as config_lib
from prorl_jax.algo import dynamic_sampling
from prorl_jax.parallel import dist
from prorl_jax.records import EngineStats, PromptItem, Request, Result
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.trainer import collect as collect_lib
from prorl_jax.trainer import placement
from prorl_jax.trainer.plan import rollout_plan


class Items:
  def __init__(self):
    self.k = 0

  def take(self, n):
    out = []
    for _ in range(n):
      out.append(PromptItem([self.k, 7], "chain_sum", "1", str(self.k)))
      self.k += 1
    return out


def _answer(ex, stop, served, version_of, inflight=False, bodies=None):
  while not stop.is_set():
    claim = ex.queue.claim("fake")
    if claim is None:
      stop.wait(0.01)
      continue
    req = claim.request
    if bodies is not None:
      bodies.append(req)
    rows = req.rows
    scores = np.concatenate([[1.0, 0.0] if p[0] % 2 == 0 else [1.0, 1.0] for p in req.prompts])
    arrays = {
      "tokens": np.full((rows, 3), 5, np.int32),
      "logprobs": np.full((rows, 3), -0.5, np.float32),
      "lengths": np.full(rows, 3, np.int32),
      "stopped": np.ones(rows, bool),
      "scores": scores.astype(np.float32),
      "verifier_failed": np.zeros(rows, bool),
    }
    v = version_of(claim.request_id)
    if inflight:  # the last token of every row drawn by the next version; row 0 ends before it
      arrays["versions"] = np.asarray([[v, v, v + 1]] * rows, np.int32)
      arrays["lengths"][0] = 2
    served.append(claim.request_id)
    # with in-flight updates, what the continuous engine reports with each result
    stats = EngineStats(peak_pages=3, page_bytes=2**19, weight_swaps=1) if inflight else None
    ex.queue.commit(claim, Result(**arrays, policy_version=v, engine_stats=stats or EngineStats()))


def _collect(tmp_path, version_of, inflight=False, bodies=None, **rollout):
  cfg = config_lib.base_config()
  cfg.rollout.n, cfg.rollout.prompts_per_step = 2, 4
  cfg.rollout.local_workers, cfg.rollout.external_workers = "1", 0
  cfg.rollout.timeout_s = 30.0
  cfg.algo.max_gen_rounds = 5
  for k, v in rollout.items():
    cfg.rollout[k] = v
  buffer = dynamic_sampling.GroupBuffer()
  ex = Exchange(f"file://{tmp_path}/exchange")
  stop, served = threading.Event(), []
  args = (ex, stop, served, version_of, inflight, bodies)
  t = threading.Thread(target=_answer, args=args, daemon=True)
  t.start()
  try:
    plan = rollout_plan(cfg, placement.worker_count(cfg))
    got = collect_lib.collect(plan, Items(), buffer, ex, None, step=7, version=3)
  finally:
    stop.set()
    t.join()
  return buffer, got, served


def test_collect_refills_until_enough_informative_groups(tmp_path):
  buffer, got, served = _collect(tmp_path, lambda rid: 3)
  groups, info = got.groups, got.metrics
  # each round of 4 prompts has 2 informative ones (even first token): 2 rounds give 4
  assert info["sampling/rounds"] == 2 and info["sampling/keep_rate"] == 0.5
  assert got.keep_rate == 4 / 8  # the typed value that sizes the next prefetch
  # it crosses the hosts' broadcast as plain data and comes back as it was
  back = collect_lib.Collected(*dist.unpack(dist.pack(got)))
  assert back.keep_rate == got.keep_rate and back.metrics == info
  assert [g.uid for g in back.groups] == [g.uid for g in groups]
  assert sorted(int(g.uid) for g in groups) == [0, 2, 4, 6]
  assert all(g.raw_scores.tolist() == [1.0, 0.0] for g in groups)
  assert info["staleness/0"] == 4 and info["sampling/stale_dropped"] == 0
  assert served == ["s0000007-g00-c00000", "s0000007-g01-c00000"]  # ids name the step and round
  assert len(buffer) == 0


def test_collect_never_trains_on_results_beyond_the_staleness_bound(tmp_path):
  # the first round comes back from weights v1 while the trainer is at v3 (bound 1): dropped
  _, got, served = _collect(tmp_path, lambda rid: 1 if "-g00-" in rid else 3, max_staleness=1)
  groups, info = got.groups, got.metrics
  assert info["sampling/stale_dropped"] == 1
  assert got.keep_rate == 4 / 8  # the dropped round generated no group
  assert sorted(int(g.uid) for g in groups) == [4, 6, 8, 10]
  assert info["sampling/rounds"] == 3 and served[0] == "s0000007-g00-c00000"


def test_prefetch_rounds_fill_the_next_step_without_refill():
  rounds = dynamic_sampling.prefetch_rounds
  # nothing carried, nothing pending: 64 groups at a keep rate of 1/2 are 2 rounds of 64 prompts
  assert rounds(64, 0, 0.0, 0.5) == 2
  # 48 carried + 64 expected from this step's prefetch - 64 taken = 48 left: 16 more, 1 round
  assert rounds(64, 48, 64.0, 0.5) == 1
  assert rounds(64, 90, 64.0, 0.5) == 1  # more than enough left: still one round, never none
  assert rounds(64, 0, 0.0, 0.2) == 5 and rounds(64, 0, 0.0, 0.2, max_rounds=3) == 3
  assert rounds(64, 0, 0.0, 0.0) == 20  # a keep rate of 0 counts as 0.05: bounded
  assert rounds(64, 0, 0.0, 1.0) == 1


def _lost_while_retiring(ex, rid, body):
  """A request served, then the trainer killed inside `queue.retire()`: its request file and
  result data deleted, the result manifest not yet."""
  import json

  stop, served = threading.Event(), []
  ex.queue.put(body, request_id=rid)
  t = threading.Thread(target=_answer, args=(ex, stop, served, lambda r: 0), daemon=True)
  t.start()
  while not ex.results.committed(rid):
    stop.wait(0.01)
  stop.set()
  t.join()
  manifest = json.loads(ex.queue.store.read(f"results/{rid}/manifest.json")[0])
  ex.queue.store.write(f"requests/{rid}.json", None)
  ex.queue.store.write(manifest["data_key"], None)
  assert ex.results.committed(rid) and not ex.queue.has(rid)  # the state the cut leaves


def test_a_request_lost_while_retiring_is_put_again_from_the_record(tmp_path):
  import time

  import pytest

  from prorl_jax.records import PromptMeta, SamplingParams
  from prorl_jax.rollout.queue import LostRequest, wait_for_results

  ex = Exchange(f"file://{tmp_path}/exchange")
  body = Request(
    prompts=[[2, 7]],
    n=2,
    sampling=SamplingParams(max_new_tokens=3),
    meta=[PromptMeta("chain_sum", "1")],
    seed=5,
  )
  rid = "s0000004-p-c00024"
  _lost_while_retiring(ex, rid, body)
  stop, served = threading.Event(), []
  t = threading.Thread(target=_answer, args=(ex, stop, served, lambda r: 0), daemon=True)
  t.start()
  try:
    done = wait_for_results(ex.queue, [rid], timeout_s=30, what="step 4", requests={rid: body})
  finally:
    stop.set()
    t.join()
  assert served == [rid] and done[rid].scores.tolist() == [1.0, 0.0]  # served again
  assert ex.queue.load(rid).seed == 5  # the same request: same id, same seed
  # without the trainer's record nothing can produce it: one line at once, not a 300 s wait
  lost = "s0000004-p-c00032"
  _lost_while_retiring(ex, lost, body)
  t0 = time.time()
  with pytest.raises(LostRequest, match=f"request {lost} has no result and no readable request"):
    wait_for_results(ex.queue, [lost], timeout_s=300, what="step 4", rows={lost: 2})
  assert time.time() - t0 < 10


def test_tokens_from_an_in_flight_update_are_counted_and_the_result_keeps_its_oldest_version(
  tmp_path,
):
  bodies = []
  info = _collect(
    tmp_path, lambda rid: 3, inflight=True, bodies=bodies, max_staleness=1, inflight_updates=True
  )[1].metrics
  assert bodies and all(b.max_version is None for b in bodies)  # any newer version may come
  # 2 rounds x 8 rows, each row's third token from v4 except row 0 of each request (2 tokens)
  assert info["sampling/inflight_tokens"] == 2 * (8 - 1)
  assert info["staleness/0"] == 4  # admitted by the oldest version, v3
  assert info["engine/weight_swaps"] == 2 and info["engine/peak_kv_mib"] == 1.5  # 2 results
  bodies = []
  plain = _collect(tmp_path / "plain", lambda rid: 3, bodies=bodies)[1].metrics
  assert plain["sampling/inflight_tokens"] == 0
  assert "engine/weight_swaps" not in plain and "engine/peak_kv_mib" not in plain
  assert bodies and all(b.max_version == 3 for b in bodies)  # pinned to the trainer's version
