"""Orbax checkpoints of a run: the sharded train state and the host state, saved together.

Items: `state` (TrainState: params, opt state, ref params, step, skipped updates) restored into its
shardings, and `host` (JSON: data cursor, carry-over buffer, policy version, length-penalty
phase, reset history, metric history the triggers need). Saves are asynchronous; the latest N
are kept plus the best by validation. A corrupt latest checkpoint falls back to the previous one.
"""

from __future__ import annotations

import logging
import os

import jax
import orbax.checkpoint as ocp
from orbax.checkpoint.checkpoint_managers import preservation_policy as pp

log = logging.getLogger(__name__)


class Checkpointer:
  """A run's checkpoint directory (local or gs://): `save(step, state, host)` in the background,
  `restore_latest` of the newest readable step, `wait` for the save in flight, `close`. The
  latest `keep` steps are kept, and the best by validation pass@1 besides."""

  def __init__(self, directory: str, keep: int = 3, async_save: bool = True):
    policy = pp.AnyPreservationPolicy(
      [
        pp.LatestN(keep),
        pp.BestN(
          get_metric_fn=lambda m: m["val_pass@1"], n=1, keep_checkpoints_without_metrics=False
        ),
      ]
    )
    if "://" not in directory:  # gs:// and other Orbax paths stay as given
      directory = os.path.abspath(directory)
    self.manager = ocp.CheckpointManager(
      directory,
      item_names=("state", "host"),
      options=ocp.CheckpointManagerOptions(
        preservation_policy=policy,
        enable_async_checkpointing=async_save,
        cleanup_tmp_directories=True,
      ),
    )

  def save(self, step: int, state, host: dict, val_metric: float | None = None):
    metrics = {"val_pass@1": val_metric} if val_metric is not None else None
    self.manager.save(
      step,
      args=ocp.args.Composite(state=ocp.args.StandardSave(state), host=ocp.args.JsonSave(host)),
      metrics=metrics,
    )

  def steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def restore_latest(self, abstract_state):
    """(step, state, host) from the newest checkpoint that restores, or None if there is none.

    `abstract_state` carries the target shapes, dtypes and shardings (jax.ShapeDtypeStruct).
    """
    for step in reversed(self.steps()):
      try:
        out = self.manager.restore(
          step,
          args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state), host=ocp.args.JsonRestore()
          ),
        )
        return step, out["state"], out["host"]
      except Exception as e:  # noqa: BLE001 - any failure: fall back to the previous step
        log.warning(
          "checkpoint %d in %s cannot be restored (%s: %s); trying the previous one",
          step,
          self.manager.directory,
          type(e).__name__,
          e,
        )
    return None

  def wait(self):
    self.manager.wait_until_finished()

  def close(self):
    self.manager.wait_until_finished()
    self.manager.close()


def abstract_like(tree, shardings):
  """ShapeDtypeStructs with shardings: the restore target, without allocating anything."""
  return jax.tree.map(
    lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree, shardings
  )
