"""Rollout results on the exchange: results/<id>/data-<attempt>-<worker>.npz, manifest last.

A result is committed when its manifest (`{data_key, size, sha256, worker, policy_version,
...}`) exists; it is created "only if absent", so one request gets one result. A reader checks
the manifest's schema, the data's size and sha256, and the arrays' shapes and values; a torn
result is skipped, a malformed one quarantined, both counted.
"""

from __future__ import annotations

import io
import json
import time

import numpy as np

from prorl_jax.records import Result
from prorl_jax.rollout.entries import (
  InvalidEntry,
  check_result_arrays,
  check_result_manifest,
  parse_object,
)
from prorl_jax.rollout.store import NO_VALUE, KvStore, sha


def encode_arrays(arrays: dict[str, np.ndarray]) -> bytes:
  buf = io.BytesIO()
  np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
  return buf.getvalue()


def decode_arrays(data: bytes) -> dict[str, np.ndarray]:
  with np.load(io.BytesIO(data), allow_pickle=False) as z:
    return {k: z[k] for k in z.files}


class ResultStore:
  """Commits, reads (verified) and deletes the results of one store."""

  def __init__(self, store: KvStore):
    self.store = store

  def committed(self, rid: str) -> bool:
    return self.store.read(f"results/{rid}/manifest.json")[0] is not None

  def commit(self, rid: str, result: Result) -> bool:
    """`result` in its stored form (`Result.stored`): data first, then the manifest only if none
    exists; False (and the data removed) when another attempt committed first."""
    arrays, fields = result.stored()
    data = encode_arrays(arrays)
    data_key = f"results/{rid}/data-{result.attempt}-{result.worker}.npz"
    self.store.write(data_key, data)
    manifest = dict(
      fields,
      request_id=rid,
      data_key=data_key,
      size=len(data),
      sha256=sha(data),
      committed=time.time(),
    )
    created = self.store.write(
      f"results/{rid}/manifest.json", json.dumps(manifest).encode(), if_equal=NO_VALUE
    )
    if not created:
      self.store.write(data_key, None)
      self.store.stats["lost_commit_race"] += 1
    return bool(created)

  def read(self, rid: str, rows: int | None = None) -> Result | None:
    """The committed, verified result of `rid` (`rows`: the rows the request asked
    for); None if absent, corrupt (skipped) or malformed (quarantined)."""
    key = f"results/{rid}/manifest.json"
    data, _ = self.store.read(key)
    if data is None:
      return None
    try:
      manifest = check_result_manifest(parse_object(data), rid)
    except InvalidEntry as e:
      self.store.quarantine("result", key, data, str(e))
      return None
    blob, _ = self.store.read(manifest["data_key"])
    if blob is None or len(blob) != manifest["size"] or sha(blob) != manifest["sha256"]:
      self.store.skip("result", key, "data missing, truncated or checksum mismatch")
      return None
    try:
      return Result.of(manifest, check_result_arrays(decode_arrays(blob), rows))
    except Exception as e:  # noqa: BLE001 - hostile bytes may fail to decode in any way
      self.store.quarantine("result", manifest["data_key"], blob, f"malformed data: {e}")
      self.store.write(key, None)
      return None

  def delete(self, rid: str):
    self.store.delete_prefix(f"results/{rid}/")
