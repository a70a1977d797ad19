"""Orbax checkpoints: latest N plus the best by validation, and a corrupt latest falls back."""

import logging
import os

import jax
import jax.numpy as jnp
import numpy as np

from prorl_jax.trainer.checkpoint import Checkpointer, abstract_like


def _state(i):
  return {"w": jnp.full((4, 3), float(i)), "step": jnp.asarray(i, jnp.int32)}


def _abstract():
  s = _state(0)
  return abstract_like(s, jax.tree.map(lambda a: a.sharding, s))


def test_keeps_latest_n_and_the_best_by_validation(tmp_path):
  ck = Checkpointer(str(tmp_path / "ck"), keep=2, async_save=True)
  vals = {1: 0.2, 2: 0.9, 3: None, 4: 0.5, 5: None, 6: 0.4}
  for step, val in vals.items():
    ck.save(step, _state(step), {"step": step}, val)
  ck.wait()
  assert ck.steps() == [2, 5, 6]  # the two newest, and step 2 with the best val pass@1
  step, state, host = ck.restore_latest(_abstract())
  assert step == 6 and host == {"step": 6}
  np.testing.assert_array_equal(state["w"], np.full((4, 3), 6.0))
  ck.close()


def test_corrupt_latest_falls_back_to_the_previous_one(tmp_path, caplog):
  ck = Checkpointer(str(tmp_path / "ck"), keep=3, async_save=False)
  for step in (1, 2, 3):
    ck.save(step, _state(step), {"step": step})
  ck.close()
  broken = 0
  for root, _, files in os.walk(tmp_path / "ck" / "3" / "state"):
    for name in files:  # truncate every data file of step 3's state
      with open(os.path.join(root, name), "wb"):
        broken += 1
  assert broken
  ck = Checkpointer(str(tmp_path / "ck"), keep=3, async_save=False)
  with caplog.at_level(logging.WARNING, logger="prorl_jax.trainer.checkpoint"):
    step, state, host = ck.restore_latest(_abstract())
  assert step == 2 and host == {"step": 2} and int(state["step"]) == 2
  np.testing.assert_array_equal(state["w"], np.full((4, 3), 2.0))
  assert any("checkpoint 3" in r.message and "previous one" in r.message for r in caplog.records)
  ck.close()


def test_no_checkpoint_means_a_fresh_start(tmp_path):
  ck = Checkpointer(str(tmp_path / "ck"), keep=1, async_save=False)
  assert ck.restore_latest(_abstract()) is None
  ck.close()
