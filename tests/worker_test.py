"""The rollout worker as a real process on a real exchange directory."""

import logging
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from prorl_jax.demo import chain_sum, tiny_base
from prorl_jax.model import load_tokenizer
from prorl_jax.model.tokenizer import prompt_ids
from prorl_jax.records import EngineStats, Request
from prorl_jax.rewards import ifeval
from prorl_jax.rollout import worker
from prorl_jax.rollout.exchange import Exchange

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
  return tiny_base.build(str(tmp_path_factory.mktemp("m") / "base"))


def _start(url, *extra):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", XLA_FLAGS="")
  return subprocess.Popen(
    [
      sys.executable,
      "-m",
      "prorl_jax.cli.worker",
      f"--exchange={url}",
      "--engine=jax",
      "--poll_seconds=0.05",
      *extra,
    ],
    env=env,
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
  )


class _Lines:
  """A process's output lines, read by a thread (a silent process cannot hang the test)."""

  def __init__(self, proc):
    import queue
    import threading

    self.q: queue.Queue = queue.Queue()
    threading.Thread(
      target=lambda: [self.q.put(x) for x in proc.stdout] + [self.q.put(None)]
    ).start()

  def until(self, text: str, timeout: float) -> None:
    """Waits for a line that contains `text`; fails after `timeout` s or if the output ends."""
    deadline = time.time() + timeout
    while True:
      line = self.q.get(timeout=max(0.0, deadline - time.time()))
      assert line is not None, f"the process ended before {text!r}"
      if text in line:
        return

  def rest(self, timeout: float) -> str:
    out, deadline = [], time.time() + timeout
    while (line := self.q.get(timeout=max(0.0, deadline - time.time()))) is not None:
      out.append(line)
    return "".join(out)


# Scores that vary over random text (a random model never writes a correct chain sum): the
# fraction of these digits present in the response.
DIGITS = [
  {"type": "letter_frequency", "letter": d, "relation": "at least", "num": 1} for d in "123"
]


def _request(ex, tok, rid, min_version=0, n=4, meta=None):
  rng = np.random.RandomState(0)
  items = [chain_sum.make_item(rng) for _ in range(3)]
  return ex.queue.put(
    Request.from_json(
      {
        "prompts": [prompt_ids(tok, it["prompt"]) for it in items],
        "n": n,
        "seed": 5,
        "sampling": {"max_new_tokens": 12, "temperature": 1.0},
        "min_version": min_version,
        "meta": meta or [{"data_source": "chain_sum", "reference": it["answer"]} for it in items],
      }
    ),
    request_id=rid,
  ), items


def _wait(pred, timeout, what):
  t0 = time.time()
  while not pred():
    if time.time() - t0 > timeout:
      raise AssertionError(f"timed out after {timeout}s waiting for {what}")
    time.sleep(0.1)


def _with_probe(base, dest):
  """A copy of the model with probe.json: the trainer's log-probs of two fixed sequences."""
  from prorl_jax.model import load_hf
  from prorl_jax.trainer.versions import write_probe

  shutil.copytree(base, dest)
  write_probe(*load_hf(base), [[1, 8, 9, 10, 11, 12], [1, 13, 14]], dest)
  return dest


def test_worker_serves_a_request_end_to_end(tmp_path, base):
  url = f"file://{tmp_path}/ex"
  ex = Exchange(url)
  ex.weights.publish(0, step=0, src_dir=_with_probe(base, str(tmp_path / "probed")))
  tok = load_tokenizer(base)
  meta = [{"data_source": "ifeval", "reference": None, "extra": {"instructions": DIGITS}}] * 3
  rid, items = _request(ex, tok, "req0", meta=meta)
  proc = _start(url, "--max_requests=1")
  try:
    assert proc.wait(timeout=180) == 0, proc.stdout.read()
  finally:
    proc.kill()
  res = ex.results.read(rid)
  arrays = res.arrays()
  assert res.policy_version == 0 and res.attempt == 0
  assert res.probe_mismatch["max"] < 1e-4  # the JAX engine is the trainer's model
  assert arrays["tokens"].shape == (12, 12) and arrays["scores"].shape == (12,)
  ends = worker.end_token_ids(tok)
  for r in range(12):  # the worker's scores: the verifier's of the text before its end token
    text = worker.response_text(tok, arrays["tokens"][r], int(arrays["lengths"][r]), ends)
    assert tok.eos_token not in text
    expect = ifeval.score(text, None, instructions=DIGITS).value
    assert arrays["scores"][r] == pytest.approx(expect)
  assert len(set(arrays["scores"].tolist())) > 1  # not a comparison of zeros with zeros
  assert not arrays["verifier_failed"].any()
  assert np.all(arrays["logprobs"][arrays["tokens"] > 0] <= 0)


def test_a_continuous_batching_worker_returns_the_static_workers_rows(tmp_path, base):
  # the same request (seed 5, sampled, 3 prompts x 4) to a worker of each batching: the same
  # tokens, lengths, log-probs and scores, row for row
  tok = load_tokenizer(base)
  got = {}
  paged = '{"batching": "continuous", "slots": 5, "page_size": 4, "steps_per_sync": 3}'
  for name, extra in (("static", ()), ("continuous", (f"--engine_options={paged}",))):
    url = f"file://{tmp_path}/{name}"
    ex = Exchange(url)
    ex.weights.publish(0, step=0, src_dir=base)
    rid, _ = _request(ex, tok, "req0")
    proc = _start(url, "--max_requests=1", *extra)
    try:
      out = proc.communicate(timeout=180)[0]
      assert proc.returncode == 0, out
    finally:
      proc.kill()
    got[name] = ex.results.read(rid)
  # the continuous engine ran (its page and step counts come back with the result)
  stats = got["continuous"].engine_stats
  assert stats.decode_steps > 0 and stats.peak_pages > 0 and stats.page_bytes > 0
  assert got["static"].engine_stats == EngineStats()  # the static sampler counts none
  a, b = got["static"].arrays(), got["continuous"].arrays()
  assert len(set(a["lengths"].tolist())) > 1  # ragged rows: slots were refilled
  for key in ("tokens", "lengths", "scores"):
    np.testing.assert_array_equal(a[key], b[key])
  np.testing.assert_allclose(a["logprobs"], b["logprobs"], atol=2e-5)


def test_a_bad_engine_option_is_one_line_before_anything_starts(tmp_path):
  for opts, says in (
    (
      '{"batching": "continuous", "slot": 4}',
      "no option slot; its options: attention, batching, dtype, page_size, pages, slots",
    ),
    ('{"batching": "dynamic"}', "batching must be static or continuous"),
    ("[1]", "--engine_options must be a JSON object"),
  ):
    proc = _start(f"file://{tmp_path}/ex", f"--engine_options={opts}")
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 2, out
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and says in errors[0], out
    assert "Traceback" not in out


def test_kill9_mid_request_is_finished_once_by_a_restarted_worker(tmp_path, base):
  url = f"file://{tmp_path}/ex"
  ex = Exchange(url, lease_seconds=2.0)
  ex.weights.publish(0, step=0, src_dir=base)
  rid, _ = _request(ex, load_tokenizer(base), "req1", min_version=1)  # needs weights v1
  first = _start(url, "--lease_seconds=2")
  try:
    _wait(lambda: ex.store.read(f"leases/{rid}.json")[0] is not None, 120, "the first claim")
    os.kill(first.pid, signal.SIGKILL)  # holding the lease, waiting for v1
    first.wait(timeout=10)
  finally:
    first.kill()
  assert not ex.results.committed(rid)
  ex.weights.publish(1, step=1, src_dir=base)
  second = _start(url, "--lease_seconds=2", "--max_requests=1")
  try:
    assert second.wait(timeout=180) == 0, second.stdout.read()
  finally:
    second.kill()
  res = ex.results.read(rid)
  assert res.attempt == 1 and res.policy_version == 1
  results = [k for k in ex.store.list(f"results/{rid}/") if k.endswith(".npz")]
  assert len(results) == 1  # committed exactly once


def test_sigterm_stops_an_idle_worker_cleanly(tmp_path, base):
  url = f"file://{tmp_path}/ex"
  Exchange(url).weights.publish(0, step=0, src_dir=base)
  proc = _start(url)
  try:
    lines = _Lines(proc)
    lines.until("loaded weights v0", timeout=300)  # idle from here on: nothing to serve
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert "stopped after 0 requests" in lines.rest(timeout=30)
  finally:
    proc.kill()


def test_a_worker_on_an_exchange_without_weights_says_so(tmp_path, caplog):
  from prorl_jax.rollout.worker import Worker

  url = f"file://{tmp_path}/typo"
  w = Worker(
    Exchange(url),
    engine=None,
    cache_dir=str(tmp_path / "c"),
    worker_id="w",
    poll_s=0.02,
    pool=object(),
  )
  with caplog.at_level(logging.WARNING, logger="prorl_jax.worker"):
    w.run(idle_exit_s=0.8, no_weights_warn_s=0.3)
  warnings = [r.message for r in caplog.records if "no committed weights" in r.message]
  assert 1 <= len(warnings) <= 3 and url in warnings[0] and "--exchange" in warnings[0]


def test_an_in_flight_update_mid_request_is_loaded_and_recorded_per_token(tmp_path, base):
  import jax

  from prorl_jax.model import load_hf, save_hf
  from prorl_jax.rewards.pool import VerifierPool
  from prorl_jax.rollout.engines.jax_engine import JaxEngine
  from prorl_jax.rollout.worker import Worker

  newer = str(tmp_path / "v1")
  shutil.copytree(base, newer)  # the tokenizer's files; the weights are replaced below
  model_cfg, params = load_hf(base)
  save_hf(model_cfg, jax.tree.map(lambda x: x * 1.25, params), newer)
  ex = Exchange(f"file://{tmp_path}/ex")
  ex.weights.publish(0, step=0, src_dir=base)
  rid, _ = _request(ex, load_tokenizer(base), "req0")
  engine = JaxEngine(batching="continuous", slots=4, page_size=4, steps_per_sync=2)
  pool = VerifierPool(1)
  worker = Worker(ex, engine, str(tmp_path / "cache"), "w", 0.0, pool, inflight_updates=True)
  looks = []
  real = worker._newer_weights

  def publish_during_the_request(max_version):
    looks.append(worker.version)
    if len(looks) == 3:  # two device calls in: the trainer publishes v1
      ex.weights.publish(1, step=1, src_dir=newer)
    return real(max_version)

  worker._newer_weights = publish_during_the_request
  try:
    worker.run(max_requests=1)
  finally:
    pool.close()
  res = ex.results.read(rid)
  assert res.policy_version == 0 and worker.version == 1  # admitted as v0's; the worker moved on
  assert res.engine_stats.weight_swaps == 1
  live = np.arange(res.tokens.shape[1])[None, :] < res.lengths[:, None]
  v = res.versions
  assert set(v[live].tolist()) == {0, 1} and (v[~live] == -1).all()
  assert all(np.all(np.diff(v[r, : res.lengths[r]]) >= 0) for r in range(len(v)))
  spans = [r for r in range(len(v)) if {0, 1} <= set(v[r, : res.lengths[r]].tolist())]
  assert spans  # a live sequence continued through the update


def test_in_flight_updates_need_continuous_batching(tmp_path):
  proc = _start(f"file://{tmp_path}/ex", "--inflight_updates")  # static batching
  out = proc.communicate(timeout=120)[0]
  assert proc.returncode == 2, out
  errors = [line for line in out.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and "needs an engine that swaps weights" in errors[0], out
