"""Many hosts, one program: JAX's multi-controller runtime and the few helpers the loop needs.

Every trainer process runs the same `train.run`; the mesh spans all processes' devices. Process 0
(the primary) is the only one that talks to the exchange (requests, results, weights), runs
validation, writes metrics and summaries; it hands each step's scored groups and validation
results to the others with `broadcast`, so every process builds the same global batch. Orbax
saves and restores the sharded state from all processes together.

`initialize(cfg.dist)` picks the cluster from, in order: explicit flags (`dist.coordinator`,
`dist.num_processes`, `dist.process_id`), or with `dist.auto=True` JAX's own detection (SLURM,
Open MPI, TPU pod slices, ...). With neither, the run is single-process.
"""

from __future__ import annotations

import logging
import os
import pickle

import jax
import numpy as np

log = logging.getLogger(__name__)
_STATE = {"initialized": False}


def initialize(dcfg) -> None:
  """Joins the process group (once; a no-op for a single-process run)."""
  if _STATE["initialized"]:
    return
  explicit = bool(dcfg.coordinator)
  if not explicit and not dcfg.auto:
    _STATE["initialized"] = True
    return
  if "cpu" in os.environ.get("JAX_PLATFORMS", "").split(","):
    # CPU processes exchange collectives through gloo (multi-host tests, CPU clusters).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if explicit:
    jax.distributed.initialize(coordinator_address=dcfg.coordinator,
                               num_processes=dcfg.num_processes, process_id=dcfg.process_id,
                               initialization_timeout=int(dcfg.timeout_s))
  else:
    jax.distributed.initialize(initialization_timeout=int(dcfg.timeout_s))
  _STATE["initialized"] = True
  log.info("joined the process group as %d of %d (%d local devices, %d global)",
           jax.process_index(), jax.process_count(), jax.local_device_count(),
           jax.device_count())


def is_primary() -> bool:
  return jax.process_index() == 0


def multi() -> bool:
  return jax.process_count() > 1


def broadcast(obj=None):
  """The primary's `obj` (any picklable value) on every process; the others pass anything.

  pickle is safe here: the bytes are made in memory by process 0 of the same job and travel only
  through JAX's own collectives (never through storage or a socket this code opens), and the
  payload (scored groups: nested dicts/lists/tuples of numpy arrays) has no plain-data codec.
  """
  if not multi():
    return obj
  from jax.experimental import multihost_utils as mu

  data = np.frombuffer(pickle.dumps(obj), np.uint8) if is_primary() else np.zeros(0, np.uint8)
  size = int(mu.broadcast_one_to_all(np.asarray([data.size], np.int64))[0])
  buf = data if is_primary() else np.zeros(size, np.uint8)
  return pickle.loads(np.asarray(mu.broadcast_one_to_all(buf)).tobytes())


def barrier(name: str) -> None:
  if multi():
    from jax.experimental import multihost_utils as mu

    mu.sync_global_devices(name)


def to_host(x) -> np.ndarray:
  """A numpy copy of a (possibly multi-process, sharded) array; every process must call it."""
  if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated:
    from jax.experimental import multihost_utils as mu

    return np.asarray(mu.process_allgather(x, tiled=True))
  return np.asarray(x)


def host_tree(tree):
  return jax.tree.map(to_host, tree)


def global_batch(batch: dict, shardings: dict) -> dict:
  """Host numpy arrays (the same full values on every process) -> global arrays."""
  if not multi():
    return batch
  return {k: jax.make_array_from_callback(v.shape, shardings[k], lambda idx, v=v: v[idx])
          for k, v in batch.items()}
