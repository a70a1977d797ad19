"""The loop's pieces that need no model: the checkpointed loop state with its data cursor and
carry-over buffer, and the exchange a (resumed) run starts from."""

import dataclasses
import json

import numpy as np

from prorl_jax import config as config_lib
from prorl_jax.algo import dynamic_sampling
from prorl_jax.records import Group, Prefetch, PromptMeta, Request, SamplingParams
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.trainer import loop_state, preflight, run_dir, versions
from prorl_jax.trainer.loop_state import LoopState
from prorl_jax.trainer.plan import Plan
from tests import loop_helpers


class Counter:
  """A training source whose cursor is one number."""

  def __init__(self):
    self.k = 0

  def take(self, n):
    self.k += n
    return list(range(self.k - n, self.k))

  def state(self):
    return {"k": self.k}

  def load_state(self, s):
    self.k = s["k"]


def _group(i, version):
  return loop_helpers.group(
    [1.0, 0.0], prompt_ids=[i, 7], tokens=np.full((2, 3), i), policy_version=version
  )


def test_the_checkpointed_loop_state_resumes_source_and_buffer_exactly():
  source = Counter()
  source.take(12)
  buffer = dynamic_sampling.GroupBuffer([_group(1, 4), _group(2, 5)])
  live = LoopState(step=5, version=5, resets=[{"step": 3, "why": "schedule"}], pass1_start=0.25)
  saved = json.loads(json.dumps(loop_state.loop_json(live, source, buffer)))  # as a checkpoint does
  assert live.data == {} and live.buffer == []  # the live loop state is not changed
  fresh = Counter()
  pins = versions.Pins()
  got, got_buffer = loop_state.resume_loop(saved, fresh, pins, 5)
  assert pins.versions() == set()  # no prefetch: nothing to pin
  assert fresh.k == 12 and fresh.take(2) == [12, 13]  # the cursor continues where it stood
  assert (got.step, got.version, got.resets, got.pass1_start) == (5, 5, live.resets, 0.25)
  taken = got_buffer.take(2)
  assert [int(g.prompt_ids[0]) for g in taken] == [1, 2]
  assert [g.policy_version for g in taken] == [4, 5]
  np.testing.assert_array_equal(taken[1].tokens, np.full((2, 3), 2))


def test_a_resumed_run_pins_the_weights_of_its_checkpoints_prefetch():
  """A pipelined run's checkpoint holds a prefetch sampled one version behind; the resumed run
  samples it again with those weights, so they stay on the exchange through its next saves."""
  prefetch = Prefetch(step=6, version=4, rounds=1, requests={})
  live = LoopState(step=5, version=5, prefetch=prefetch)
  saved = json.loads(
    json.dumps(loop_state.loop_json(live, Counter(), dynamic_sampling.GroupBuffer()))
  )
  pins = versions.Pins()
  got, _ = loop_state.resume_loop(saved, Counter(), pins, 5)
  assert got.prefetch == prefetch and pins.versions() == {4}
  pins.saved(6, LoopState(step=6, version=6))  # the resumed run's first save, its prefetch used
  assert pins.versions() == {4}  # the restored checkpoint is one of the newest two saves
  pins.saved(7, LoopState(step=7, version=7))
  assert pins.versions() == set()


def test_a_resumed_run_starts_from_an_exchange_without_the_interrupted_runs_leftovers(tmp_path):
  cfg = config_lib.base_config()
  cfg.run_dir = str(tmp_path / "run")
  cfg.rollout.exchange = f"file://{tmp_path}/exchange"
  ex = Exchange(cfg.rollout.exchange)
  src = tmp_path / "w"
  src.mkdir()
  (src / "model.safetensors").write_bytes(b"weights")
  for v in range(4):
    ex.weights.publish(v, step=v, src_dir=str(src))
  for i in range(3):
    ex.queue.put(
      Request([[1]], 1, SamplingParams(max_new_tokens=1), [PromptMeta("chain_sum")]),
      request_id=f"s0000002-g00-c{i:05d}",
    )
  opened = run_dir.open_exchange(
    Plan.from_config(cfg).rollout.exchange_url, LoopState(version=1)
  )  # resumed from a checkpoint of v1
  assert opened.weights.versions() == [0, 1]  # v2, v3 were published after it: redone
  assert opened.queue.ids() == []  # its requests are redone deterministically
  assert Plan.from_config(cfg).rollout.exchange_url == cfg.rollout.exchange
  cfg.rollout.exchange = ""
  assert Plan.from_config(cfg).rollout.exchange_url == str(tmp_path / "run" / "exchange")


def test_publish_writes_a_version_workers_can_load_with_its_probe(tmp_path):
  import types

  import jax

  from prorl_jax.demo import tiny_base
  from prorl_jax.model import load_hf
  from prorl_jax.rollout import probe

  base = tiny_base.build(str(tmp_path / "base"))
  model_cfg, params = load_hf(base)
  params = jax.tree.map(lambda x: x + 0.01, params)  # not the base's weights
  cfg = config_lib.base_config()
  cfg.run_dir = str(tmp_path / "run")
  cfg.model.compute_dtype = "float32"
  (tmp_path / "run").mkdir()
  setup = types.SimpleNamespace(
    plan=Plan.from_config(cfg), model_cfg=model_cfg, path=base, probe_tokens=[[1, 5, 6, 7], [2, 9]]
  )
  ex = Exchange(f"file://{tmp_path}/exchange")
  for v in (3, 4, 5):
    versions.publish(setup, types.SimpleNamespace(params=params, step=np.int32(v * 10)), ex, v)
  assert ex.weights.versions() == [3, 4, 5]  # the loop prunes (after its checkpoint), not publish
  versions.prune(ex, versions.Pins())
  assert ex.weights.versions() == [4, 5]  # two versions kept
  assert ex.weights.manifest(5)["step"] == 50
  path = ex.weights.fetch(5, str(tmp_path / "cache" / "v5"))
  _, got = load_hf(path)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(got)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  # the probe holds the trainer's own log-probs of each probe token after the first
  pr = probe.read_probe(path)
  assert pr["tokens"] == setup.probe_tokens
  lp = versions._probe_logprobs(model_cfg, params, np.array([[1, 5, 6, 7]], np.int32))
  want = [float(lp[0, t, tok]) for t, tok in enumerate([5, 6, 7])]
  np.testing.assert_allclose(np.concatenate([pr["logprobs"][0]]), want, rtol=1e-6)


def test_a_checkpoints_prefetch_keeps_its_weights_until_a_newer_checkpoint_is_finished(tmp_path):
  """A pipelined checkpoint of step s holds step s+1's prefetch, sampled with weights v(s-1).
  Step s+1 publishes v(s+1) before its own checkpoint: a run killed in between resumes from
  step s and must find v(s-1) to sample that prefetch again exactly."""
  ex = Exchange(f"file://{tmp_path}/exchange")
  src = tmp_path / "w"
  src.mkdir()
  (src / "model.safetensors").write_bytes(b"weights")
  pins = versions.Pins()
  ex.weights.publish(0, step=0, src_dir=str(src))
  for step in range(1, 7):
    ex.weights.publish(step, step=step, src_dir=str(src))  # the step's update
    # killed here, the run resumes from checkpoint step-1, whose prefetch needs v(step-2)
    assert step < 3 or step - 2 in ex.weights.versions(), (step, ex.weights.versions())
    pf = Prefetch(step=step + 1, version=step - 1, rounds=1, requests={})
    pins.saved(step, LoopState(step=step, version=step, prefetch=pf))
    versions.prune(ex, pins)
    # Orbax finishes checkpoint step-1 before it starts step's: their prefetches' weights stay,
    # and nothing older
    assert ex.weights.versions() == [v for v in range(step - 2, step + 1) if v >= 0]
  resumed = versions.Pins()  # a resumed run pins its restored checkpoint's prefetch
  resumed.saved(4, LoopState(step=4, version=4, prefetch=Prefetch(5, 3, 1, {})))
  assert resumed.versions() == {3}
  resumed.saved(5, LoopState(step=5, version=5))  # a serial checkpoint needs only its own
  resumed.saved(6, LoopState(step=6, version=6))
  assert resumed.versions() == set()


def test_advice_names_tis_for_the_pipeline_with_icepop():
  cfg = config_lib.base_config()
  assert preflight.advice(cfg) == []  # the defaults: on-policy, ICE-POP
  cfg.rollout.pipeline, cfg.rollout.max_staleness = True, 1
  (line,) = preflight.advice(cfg)
  assert "algo.is_correction=tis" in line
  cfg.algo.is_correction = "tis"
  assert preflight.advice(cfg) == []


def test_a_carry_over_group_checkpointed_as_plain_lists_reads_back_as_a_group():
  # what a checkpoint's JSON holds (and held before groups were records: no verifier_failed)
  stored = {
    "uid": "s3:1",
    "prompt_ids": [5, 6],
    "data_source": "math",
    "tokens": [[1, 2], [3, 4]],
    "gen_logp": [[-0.5, -0.25], [-1.0, -2.0]],
    "lengths": [2, 1],
    "stopped": [True, False],
    "raw_scores": [1.0, 0.0],
    "policy_version": 7,
  }
  (g,) = dynamic_sampling.GroupBuffer.from_state([stored]).take(1)
  assert g.uid == "s3:1" and g.policy_version == 7 and g.tokens.tolist() == [[1, 2], [3, 4]]
  assert g.verifier_failed.tolist() == [False, False] and g.stopped.dtype == bool
  # saved again, its arrays are arrays: each dtype kept, each value exact
  again = Group.from_json(json.loads(json.dumps(g.to_json())))
  for k in ("prompt_ids", "tokens", "gen_logp", "lengths", "stopped", "raw_scores"):
    np.testing.assert_array_equal(getattr(again, k), np.asarray(stored[k]))
    assert getattr(again, k).dtype == getattr(g, k).dtype


def test_a_carry_over_group_keeps_its_arrays_exactly_through_a_checkpoint():
  g = loop_helpers.group([1.0, 0.0], prompt_ids=[5, 6], lengths=[2, 1])
  g = dataclasses.replace(
    g, gen_logp=np.float32([[-0.1, -1 / 3], [np.nextafter(np.float32(-2), 0), 0]])
  )
  back = Group.from_json(json.loads(json.dumps(g.to_json())))
  for f in dataclasses.fields(Group):
    a, b = getattr(g, f.name), getattr(back, f.name)
    if isinstance(a, np.ndarray):
      assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), f.name
    else:
      assert a == b
