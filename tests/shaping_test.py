"""Reward shaping, the length-penalty schedule and dynamic sampling."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prorl_jax.algo import dynamic_sampling, shaping
from tests import loop_helpers

A = np.testing.assert_allclose


def test_truncation_penalty_by_hand():
  A(shaping.truncation_penalty([1.0, 0.5, 1.0], [True, False, False], 0.1), [0.1, 0.5, 1.0])
  A(shaping.truncation_penalty([1.0], [True], 1.0), [1.0])  # 1.0 = off


def test_cosine_length_penalty_by_hand():
  # r_min + (r_max − r_min)·½(1 + cos(πL/Lmax)): L=0 -> 1.0, L=Lmax/2 -> 0.75, L=Lmax -> 0.5
  A(shaping.cosine_length_reward([0, 50, 100], 100), [1.0, 0.75, 0.5], atol=1e-12)
  shaped = shaping.length_penalty([1.0, 0.0, 1.0], [True, False, True], [50, 10, 100], 100)
  A(shaped, [0.75, 0.0, 0.5], atol=1e-12)  # wrong responses unchanged
  shaped = shaping.length_penalty([1.0, 1.0], [True, True], [50, 50], 100, apply=[True, False])
  A(shaped, [0.75, 1.0], atol=1e-12)  # only the selected data sources


def test_dapo_overlong_by_hand():
  # L_max 100, buffer 20: L ≤ 80 -> 0; L = 90 -> (80 − 90)/20 = −0.5; L > 100 -> −1
  A(shaping.dapo_overlong([1, 1, 1, 1], [50, 80, 90, 101], 100, 20), [1, 1, 0.5, 0])


def test_length_penalty_schedule_cycles_and_round_trips():
  sched = shaping.LengthPenaltySchedule("scheduled", on_steps=2, off_steps=3)
  s = sched.init_state()
  phases, events = [], []
  for _ in range(11):
    phases.append(sched.is_on(s))
    s, ev = sched.advance(s)
    events.append(ev)
    s = dict(s)  # the state is a plain dict: what a checkpoint stores
  assert phases == [True, True, False, False, False, True, True, False, False, False, True]
  assert events[1] == "off" and events[4] == "on" and s["cycles"] == 2
  assert not sched.is_on(shaping.LengthPenaltySchedule("off").init_state())
  always = shaping.LengthPenaltySchedule("always", 1, 1)
  st_ = always.init_state()
  for _ in range(5):
    st_, ev = always.advance(st_)
    assert always.is_on(st_) and ev is None


@settings(max_examples=50, deadline=None)
@given(
  st.lists(
    st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=4, max_size=4), min_size=1, max_size=10
  )
)
def test_dynamic_sampling_drops_exactly_the_constant_groups(groups):
  keep = shaping.informative_groups(groups)
  assert list(keep) == [len(set(g)) > 1 for g in groups]


def _rounds(groups_per_round, total_rounds):
  rng = np.random.RandomState(0)
  count = {"n": 0}

  def generate():
    if count["n"] >= total_rounds:
      return None
    count["n"] += 1
    return [
      loop_helpers.group(rng.randint(0, 2, size=4).astype(float), uid=f"{count['n']}-{i}")
      for i in range(groups_per_round)
    ]

  return generate


def test_fill_refills_and_carries_over():
  buf = dynamic_sampling.GroupBuffer()
  out, stats = dynamic_sampling.gather_groups(buf, _rounds(6, 100), needed=5, max_rounds=10)
  assert len(out) == 5 and not stats.short
  assert all(np.std(g.raw_scores) > 0 for g in out)
  leftover = len(buf)
  assert stats.groups_kept == 5 + leftover
  restored = dynamic_sampling.GroupBuffer.from_state(buf.state())
  out2, stats2 = dynamic_sampling.gather_groups(restored, _rounds(6, 0), needed=leftover)
  assert [g.uid for g in out2] == [g.uid for g in buf.groups]  # carry-over first, in order
  assert stats2.from_carry_over == leftover


def test_fill_never_raises_when_prompts_run_out():
  buf = dynamic_sampling.GroupBuffer()
  out, stats = dynamic_sampling.gather_groups(buf, _rounds(2, 1), needed=50)
  assert stats.rounds == 1 and stats.short and len(out) <= 2  # stopped when the source ran out
  out, stats = dynamic_sampling.gather_groups(
    dynamic_sampling.GroupBuffer(), _rounds(1, 100), needed=50, max_rounds=3
  )
  assert stats.rounds == 3 and stats.short


def test_fill_without_dynamic_sampling_keeps_everything():
  buf = dynamic_sampling.GroupBuffer()
  out, stats = dynamic_sampling.gather_groups(buf, _rounds(4, 10), needed=4, dynamic_sampling=False)
  assert len(out) == 4 and stats.rounds == 1 and stats.keep_rate == 1.0


def test_buffer_evicts_expired_groups():
  buf = dynamic_sampling.GroupBuffer(
    [loop_helpers.group([0, 1], policy_version=1), loop_helpers.group([1, 0], policy_version=3)]
  )
  assert buf.evict(lambda g: g.policy_version < 2) == 1
  assert [g.policy_version for g in buf.groups] == [3]
