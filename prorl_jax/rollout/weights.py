"""Published policy weights on the exchange: weights/v<version>/<file>, manifest last; a LoRA
run's frozen base model once under bases/<id>/ (its id the content address of its files), its
versions then only adapters (`rollout/adapters.py`).

A version is committed when its manifest (`{version, step, files: {name: {size, sha256}}}`)
exists; readers trust nothing else, verify every file's size and sha256 on the way into a local
copy, and pass over (count, log) a version whose files do not match. A malformed manifest is
quarantined.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterable

from prorl_jax.rollout.entries import InvalidEntry, check_weights_manifest, parse_object, safe_name
from prorl_jax.rollout.store import KvStore, hash_file, io_pool


def shard_bytes(total_bytes: int) -> int:
  """Safetensors shard size for published weights: one shard per CPU core (8 MiB at least).

  A file's sha256 is one core's work (~1.8 GB/s here), so a single-file model caps publishing
  and verified fetching at that speed; shards are copied and hashed in parallel.
  """
  return max(8 << 20, -(-total_bytes // (os.cpu_count() or 1)))


def _prefix(version: int) -> str:
  return f"weights/v{version:08d}/"


def _base_prefix(base_id: str) -> str:
  return f"bases/{base_id}/"


def content_id(files: dict) -> str:
  """A base model's id: the sha256 (first 16 hex) of its files' names, sizes and sha256, so an
  id names exactly one set of files and a fetched manifest is checked against its own id."""
  rows = sorted((n, int(m["size"]), m["sha256"]) for n, m in files.items())
  return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16]


class WeightStore:
  """Publishes, lists, fetches (verified) and prunes weight versions of one store."""

  def __init__(self, store: KvStore):
    self.store = store

  def publish(self, version: int, step: int, src_dir: str) -> dict:
    """Copies every file of `src_dir` to weights/v<version>/ (files in parallel, each hashed
    beside its copy), then writes the manifest."""
    return self._publish(_prefix(version), {"version": version, "step": step}, src_dir)

  def publish_base(self, src_dir: str) -> str:
    """A LoRA run's frozen base model (`src_dir`, a model directory) under bases/<id>/, its id
    the content address of its files (`content_id`); published once: a base already committed
    is not copied again. Returns the id."""
    names = self._names(src_dir)
    hashed = io_pool().map(lambda n: hash_file(os.path.join(src_dir, n)), names)
    base_id = content_id({n: {"size": z, "sha256": h} for n, (z, h) in zip(names, hashed)})
    if self.base_manifest(base_id) is None:
      self._publish(_base_prefix(base_id), {"version": 0, "step": 0, "base": base_id}, src_dir)
    return base_id

  def _names(self, src_dir: str) -> list[str]:
    """The files of a directory to publish, checked (a fetched copy's manifest left out)."""
    # A fetched or published version directory has its own manifest: ours replaces it.
    names = [
      n
      for n in sorted(os.listdir(src_dir))
      if os.path.isfile(os.path.join(src_dir, n)) and n != "manifest.json"
    ]
    if not names:
      raise ValueError(
        f"publishing weights: {src_dir} holds no files; give it a saved model "
        "directory (safetensors + config.json)"
      )
    for n in names:
      try:
        safe_name(n, "file")
      except InvalidEntry as e:
        raise ValueError(f"publishing weights: {src_dir}: {e}; rename or remove it") from None
    return names

  def _publish(self, prefix: str, header: dict, src_dir: str) -> dict:
    names = self._names(src_dir)
    done = io_pool().map(
      lambda n: self.store.put_file(prefix + n, os.path.join(src_dir, n)), names
    )  # files in parallel (hashing and I/O release the GIL)
    files = {n: {"size": size, "sha256": sha} for n, (size, sha) in zip(names, done)}
    manifest = {**header, "files": files, "time": time.time()}
    self.store.put_marker(prefix + "manifest.json", json.dumps(manifest).encode())
    return manifest

  def _versions(self, committed: bool) -> list[int]:
    """Versions with any key under weights/v<N>/ (or, if `committed`, with a manifest)."""
    out = set()
    for key in self.store.list("weights/"):
      parts = key.split("/")
      if (
        len(parts) == 3
        and parts[1][:1] == "v"
        and parts[1][1:].isdigit()
        and (not committed or parts[2] == "manifest.json")
      ):
        out.add(int(parts[1][1:]))
    return sorted(out)

  def versions(self) -> list[int]:
    """Versions whose manifest exists (committed), ascending."""
    return self._versions(committed=True)

  def manifest(self, version: int) -> dict | None:
    """The version's manifest, schema-checked; a malformed one is quarantined (None)."""
    key = _prefix(version) + "manifest.json"
    data, _ = self.store.read(key)
    if data is None:
      return None
    try:
      return check_weights_manifest(parse_object(data), version)
    except InvalidEntry as e:
      self.store.quarantine("weights", key, data, str(e))
      return None

  def base_manifest(self, base_id: str) -> dict | None:
    """The manifest of base `base_id`, checked (its files' content address is its id); a
    malformed one is quarantined; None when there is none."""
    key = _base_prefix(base_id) + "manifest.json"
    data, _ = self.store.read(key)
    if data is None:
      return None
    try:
      doc = check_weights_manifest(parse_object(data), 0)
      if doc.get("base") != base_id or content_id(doc["files"]) != base_id:
        raise InvalidEntry(f"its files' content address is not {base_id}")
      return doc
    except InvalidEntry as e:
      self.store.quarantine("weights", key, data, str(e))
      return None

  def fetch_base(self, base_id: str, dest_dir: str) -> str | None:
    """Verified copy of base `base_id` in `dest_dir`, as `fetch` makes a version's."""
    manifest = self.base_manifest(base_id)
    return None if manifest is None else self._fetch(manifest, _base_prefix(base_id), dest_dir)

  def fetch(self, version: int, dest_dir: str) -> str | None:
    """Verified copy of version `version` in `dest_dir` (written atomically); None if corrupt.

    A copy already in `dest_dir` is hashed again before it is reused (a cache is local disk
    that anything may have changed); one that does not match is replaced."""
    manifest = self.manifest(version)
    if manifest is None:
      return None
    return self._fetch(manifest, _prefix(version), dest_dir)

  def _fetch(self, manifest: dict, prefix: str, dest_dir: str) -> str | None:
    if os.path.lexists(dest_dir):
      if not os.path.islink(dest_dir) and verified_copy(dest_dir, manifest):
        return dest_dir
      # Another run's version of that number, or a damaged copy: replace it.
      self.store.stats["cache_replaced"] += 1
      if os.path.islink(dest_dir):
        os.remove(dest_dir)
      else:
        shutil.rmtree(dest_dir, ignore_errors=True)
    tmp = f"{dest_dir.rstrip('/')}.tmp-{uuid.uuid4().hex[:8]}"
    os.makedirs(tmp)
    items = list(manifest["files"].items())
    ok = list(
      io_pool().map(  # `name` is one plain component (checked with the manifest)
        lambda kv: self.store.get_file(
          prefix + kv[0], os.path.join(tmp, kv[0]), (kv[1]["size"], kv[1]["sha256"])
        ),
        items,
      )
    )
    if not all(ok):
      shutil.rmtree(tmp, ignore_errors=True)
      bad = [name for (name, _), good in zip(items, ok) if not good]
      self.store.skip(
        "weights", prefix + bad[0], "missing, truncated, a symlink or checksum mismatch"
      )
      return None
    with open(os.path.join(tmp, "manifest.json"), "w") as f:
      json.dump(manifest, f)
    os.makedirs(os.path.dirname(os.path.abspath(dest_dir)), exist_ok=True)
    try:
      os.rename(tmp, dest_dir)
    except OSError:  # another process fetched it first: use theirs only if it verifies
      shutil.rmtree(tmp, ignore_errors=True)
      if not verified_copy(dest_dir, manifest):
        return None
    return dest_dir

  def delete(self, version: int):
    self.store.delete_prefix(_prefix(version))

  def prune(self, keep: int, pinned: Iterable[int] = ()):
    """Keeps the newest `keep` committed versions and the `pinned` ones; deletes other older
    ones, and the leftovers of publishes that never committed if they are older than the oldest
    version kept."""
    keep, pinned = max(1, keep), set(pinned)
    committed = self.versions()
    if len(committed) <= keep:
      return
    oldest_kept = committed[-keep]
    for v in self._versions(committed=False):
      if v < oldest_kept and v not in pinned:
        self.delete(v)


def verified_copy(dest_dir: str, manifest: dict) -> bool:
  """True when `dest_dir` holds exactly the manifest's files with their sizes and sha256."""
  try:
    names = sorted(set(os.listdir(dest_dir)) - {"manifest.json"})
  except OSError:
    return False
  if names != sorted(manifest["files"]):
    return False
  got = io_pool().map(lambda n: hash_file(os.path.join(dest_dir, n)), names)
  return all(
    g == (manifest["files"][n]["size"], manifest["files"][n]["sha256"]) for n, g in zip(names, got)
  )
