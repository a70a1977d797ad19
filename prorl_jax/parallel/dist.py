"""Many hosts, one program: JAX's multi-controller runtime and the few helpers the loop needs.

Every trainer process runs the same `trainer.loop.run`; the mesh spans all processes' devices.
Process 0 (the primary) is the only one that talks to the exchange (requests, results, weights),
runs validation, writes metrics and summaries; it hands each step's scored groups and validation
results to the others with `broadcast`, so every process builds the same global batch. Orbax
saves and restores the sharded state from all processes together.

`initialize(**cfg.dist)` picks the cluster from, in order: explicit flags (`dist.coordinator`,
`dist.num_processes`, `dist.process_id`), or with `dist.auto=True` JAX's own detection (SLURM,
Open MPI, TPU pod slices, ...). With neither, the run is single-process.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import json
import logging
import os

import jax
import numpy as np
from jax.experimental import multihost_utils as mu

log = logging.getLogger(__name__)
_STATE = {"initialized": False}


def initialize(
  coordinator: str = "",
  num_processes: int | None = None,
  process_id: int | None = None,
  *,
  auto: bool = False,
  timeout_s: float = 300.0,
) -> None:
  """Joins the process group (once; a no-op for a single-process run): at `coordinator` as
  process `process_id` of `num_processes`, or, `auto`, where JAX detects the cluster (SLURM,
  TPU pods); `timeout_s` to wait for every process."""
  if _STATE["initialized"]:
    return
  explicit = bool(coordinator)
  if not explicit and not auto:
    _STATE["initialized"] = True
    return
  if "cpu" in os.environ.get("JAX_PLATFORMS", "").split(","):
    # CPU processes exchange collectives through gloo (multi-host tests, CPU clusters).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if explicit:
    jax.distributed.initialize(
      coordinator_address=coordinator,
      num_processes=num_processes,
      process_id=process_id,
      initialization_timeout=int(timeout_s),
    )
  else:
    jax.distributed.initialize(initialization_timeout=int(timeout_s))
  _STATE["initialized"] = True
  log.info(
    "joined the process group as %d of %d (%d local devices, %d global)",
    jax.process_index(),
    jax.process_count(),
    jax.local_device_count(),
    jax.device_count(),
  )


def is_primary() -> bool:
  return jax.process_index() == 0


def multi() -> bool:
  return jax.process_count() > 1


RECORDS = "prorl_jax.records"  # the one module whose dataclasses travel between processes


def _encode(obj, arrays: list):
  """Plain data -> JSON-able tree; arrays (and numpy scalars) go to `arrays` by index."""
  if obj is None or isinstance(obj, (bool, int, float, str)):
    return obj
  if isinstance(obj, (np.ndarray, np.generic)):
    arrays.append(np.asarray(obj))
    return {"a": len(arrays) - 1, "scalar": isinstance(obj, np.generic)}
  if isinstance(obj, (list, tuple)):
    items = [_encode(x, arrays) for x in obj]
    return {"t": items} if isinstance(obj, tuple) else {"l": items}
  if isinstance(obj, dict) and all(isinstance(k, str) for k in obj):
    return {"d": {k: _encode(v, arrays) for k, v in obj.items()}}
  if dataclasses.is_dataclass(obj) and type(obj).__module__ == RECORDS:
    fields = {f.name: _encode(getattr(obj, f.name), arrays) for f in dataclasses.fields(obj)}
    return {"r": type(obj).__name__, "f": fields}
  raise TypeError(
    f"dist.broadcast sends plain data (None, bool, int, float, str, numpy arrays "
    f"and scalars, lists, tuples, str-keyed dicts, {RECORDS} records), not "
    f"{type(obj).__name__}"
  )


def _decode(tree, arrays: dict):
  if not isinstance(tree, dict):
    return tree
  if "a" in tree:
    a = arrays[f"arr_{tree['a']}"]
    return a[()] if tree["scalar"] else a
  if "t" in tree:
    return tuple(_decode(x, arrays) for x in tree["t"])
  if "l" in tree:
    return [_decode(x, arrays) for x in tree["l"]]
  if "r" in tree:  # a record type by name, from the records module only (never an import path)
    cls = getattr(importlib.import_module(RECORDS), tree["r"], None)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
      raise TypeError(f"dist.broadcast: {tree['r']!r} is not a record of {RECORDS}")
    return cls(**{k: _decode(v, arrays) for k, v in tree["f"].items()})
  return {k: _decode(v, arrays) for k, v in tree["d"].items()}


def pack(obj) -> bytes:
  """`obj` as bytes: a JSON tree (8-byte length first), then its arrays as an .npz."""
  arrays: list = []
  head = json.dumps(_encode(obj, arrays)).encode()
  buf = io.BytesIO()
  np.savez(buf, *arrays)
  return len(head).to_bytes(8, "little") + head + buf.getvalue()


def unpack(data: bytes):
  n = int.from_bytes(data[:8], "little")
  with np.load(io.BytesIO(data[8 + n :]), allow_pickle=False) as z:
    arrays = {k: z[k] for k in z.files}
  return _decode(json.loads(data[8 : 8 + n]), arrays)


def broadcast(obj=None):
  """The primary's `obj` (plain data: see `pack`) on every process; the others pass anything."""
  if not multi():
    return obj

  data = np.frombuffer(pack(obj), np.uint8) if is_primary() else np.zeros(0, np.uint8)
  size = int(mu.broadcast_one_to_all(np.asarray([data.size], np.int64))[0])
  buf = data if is_primary() else np.zeros(size, np.uint8)
  return unpack(np.asarray(mu.broadcast_one_to_all(buf)).tobytes())


def barrier(name: str) -> None:
  if multi():
    mu.sync_global_devices(name)


def to_host(x) -> np.ndarray:
  """A numpy copy of a (possibly multi-process, sharded) array; every process must call it."""
  if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated:
    return np.asarray(mu.process_allgather(x, tiled=True))
  return np.asarray(x)


def host_tree(tree):
  return jax.tree.map(to_host, tree)


def global_batch(batch: dict, shardings: dict) -> dict:
  """Host numpy arrays (the same full values on every process) -> global arrays."""
  if not multi():
    return batch
  return {
    k: jax.make_array_from_callback(v.shape, shardings[k], lambda idx, v=v: v[idx])
    for k, v in batch.items()
  }
