"""The trainer <-> rollout-worker exchange over a tensorstore key-value store.

Layout under the store (a `file://` directory, `gs://` bucket, `memory://` in tests):

  weights/v00000007/<file>            HF safetensors, config.json, tokenizer files
  weights/v00000007/manifest.json     {version, step, files: {name: {size, sha256}}}  (last)
  requests/<id>.json                  {body: {...}, sha256}
  leases/<id>.json                    {worker, attempt, expires}  (compare-and-swap writes)
  results/<id>/data-<attempt>-<worker>.npz
  results/<id>/manifest.json          {data_key, size, sha256, worker, policy_version, ...}

Commit protocol: data first, a checksummed manifest last. A reader trusts only a manifest and
verifies sizes and sha256; half-written or corrupt entries are skipped, logged and counted, never
consumed. Claims are leases written with compare-and-swap (`if_equal` on the storage
generation): a lease that is not renewed expires and another worker takes the request over. The
result manifest is created with "only if absent", so two workers never both commit a request.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hashlib
import io
import json
import logging
import os
import shutil
import time
import uuid

import numpy as np
import tensorstore as ts

log = logging.getLogger(__name__)

_NO_VALUE = b"\x02"  # tensorstore's storage generation of a missing key


def _sha(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def _normalise(url: str) -> str:
  if "://" not in url:
    url = "file://" + os.path.abspath(url)
  return url if url.endswith("/") else url + "/"


def open_kvstore(url: str) -> ts.KvStore:
  """`file:///dir/`, `gs://bucket/path/`, `memory://`, or a plain directory path."""
  return ts.KvStore.open(_normalise(url)).result()


_CHUNK_BYTES = 1 << 20


def _copy_hashed(src: str, dest: str) -> tuple[int, str]:
  """Copies `src` to `dest` (a temp name, then rename) and sha256s the bytes on the way; returns
  (size, sha256). Each chunk is hashed while it is in cache and written from the same buffer, so
  the file is read once (an in-kernel copy plus a separate hash read it twice; with the direct
  manifest write, publishing went from ~0.48 to ~0.56 of a raw copy's speed: bench/RESULTS.md)."""
  os.makedirs(os.path.dirname(dest), exist_ok=True)
  tmp = f"{dest}.tmp-{uuid.uuid4().hex[:8]}"
  digest, buf = hashlib.sha256(), bytearray(_CHUNK_BYTES)
  view, size = memoryview(buf), 0
  try:
    with open(src, "rb", buffering=0) as f, open(tmp, "wb", buffering=0) as out:
      while n := f.readinto(buf):
        digest.update(view[:n])
        done = 0
        while done < n:
          done += out.write(view[done:n])
        size += n
    os.replace(tmp, dest)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise
  return size, digest.hexdigest()


def _write_file(dest: str, data: bytes):
  """Writes `dest` under a temp name, then renames it into place."""
  os.makedirs(os.path.dirname(dest), exist_ok=True)
  tmp = f"{dest}.tmp-{uuid.uuid4().hex[:8]}"
  with open(tmp, "wb") as f:
    f.write(data)
  os.replace(tmp, dest)


_POOL: concurrent.futures.ThreadPoolExecutor | None = None


def _pool() -> concurrent.futures.ThreadPoolExecutor:
  """Threads for per-file copies and hashes (both release the GIL, so files go in parallel);
  one pool per process: starting threads per call cost more than hashing a small model."""
  global _POOL
  if _POOL is None:
    _POOL = concurrent.futures.ThreadPoolExecutor(2 * (os.cpu_count() or 1),
                                                  thread_name_prefix="exchange-io")
  return _POOL


def shard_bytes(total_bytes: int) -> int:
  """Safetensors shard size for published weights: one shard per CPU core (8 MiB at least).

  A file's sha256 is one core's work (~1.8 GB/s here), so a single-file model caps publishing
  and verified fetching at that speed; shards are copied and hashed in parallel.
  """
  return max(8 << 20, -(-total_bytes // (os.cpu_count() or 1)))


def encode_arrays(arrays: dict[str, np.ndarray]) -> bytes:
  buf = io.BytesIO()
  np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
  return buf.getvalue()


def decode_arrays(data: bytes) -> dict[str, np.ndarray]:
  with np.load(io.BytesIO(data), allow_pickle=False) as z:
    return {k: z[k] for k in z.files}


@dataclasses.dataclass
class Claim:
  request_id: str
  request: dict
  worker: str
  attempt: int
  generation: bytes  # of our lease; renewing it is a compare-and-swap on this


class Exchange:
  """One handle on the exchange; safe to use from many processes at once."""

  def __init__(self, url: str, lease_seconds: float = 60.0):
    self.url = url
    self.kv = open_kvstore(url)
    norm = _normalise(url)  # a local directory store: weights are copied by the kernel
    self.local_root = norm[len("file://"):] if norm.startswith("file://") else None
    self.lease_seconds = lease_seconds
    self.stats: collections.Counter = collections.Counter()

  # ---------------------------------------------------------------- raw helpers
  def _read(self, key: str):
    r = self.kv.read(key).result()
    return (r.value, r.stamp.generation) if r.state == "value" else (None, r.stamp.generation)

  def _write(self, key: str, value: bytes | None, if_equal: bytes | None = None) -> bytes:
    if if_equal is None:
      return self.kv.write(key, value).result().generation
    return self.kv.write(key, value, if_equal=if_equal).result().generation

  def _list(self, prefix: str) -> list[str]:
    rng = ts.KvStore.KeyRange(inclusive_min=prefix, exclusive_max=prefix[:-1] + chr(
        ord(prefix[-1]) + 1))
    return sorted(k.decode() for k in self.kv.list(rng).result())

  def _skip(self, what: str, key: str, why: str):
    self.stats[f"skipped_{what}"] += 1
    log.warning("exchange: skipping %s %s: %s", what, key, why)

  # ---------------------------------------------------------------- weights
  def publish_weights(self, version: int, step: int, src_dir: str) -> dict:
    """Copies every file of `src_dir` to weights/v<version>/ (files in parallel, each hashed
    beside its copy), then writes the manifest."""
    prefix = f"weights/v{version:08d}/"
    # A fetched or published version directory has its own manifest: ours replaces it.
    names = [n for n in sorted(os.listdir(src_dir))
             if os.path.isfile(os.path.join(src_dir, n)) and n != "manifest.json"]
    if not names:
      raise ValueError(f"publish_weights: {src_dir} holds no files; give it a saved model "
                       "directory (safetensors + config.json)")

    def put(name: str) -> tuple[int, str]:
      path = os.path.join(src_dir, name)
      if self.local_root is not None:  # readers verify size + sha256, so no fsync is needed
        return _copy_hashed(path, os.path.join(self.local_root, prefix + name))
      with open(path, "rb") as f:
        data = f.read()
      self._write(prefix + name, data)
      return len(data), _sha(data)

    done = _pool().map(put, names)  # files in parallel (hashing and I/O release the GIL)
    files = {n: {"size": size, "sha256": sha} for n, (size, sha) in zip(names, done)}
    manifest = {"version": version, "step": step, "files": files, "time": time.time()}
    if self.local_root is not None:
      # Written and renamed into place like the files (tensorstore's file store would also fsync
      # it: ~1 ms, a tenth of publishing a small model, for a marker whose files readers verify).
      _write_file(os.path.join(self.local_root, prefix + "manifest.json"),
                  json.dumps(manifest).encode())
    else:
      self._write(prefix + "manifest.json", json.dumps(manifest).encode())
    return manifest

  def _versions(self, committed: bool) -> list[int]:
    """Versions with any key under weights/v<N>/ (or, if `committed`, with a manifest)."""
    out = set()
    for key in self._list("weights/"):
      parts = key.split("/")
      if len(parts) == 3 and parts[1][:1] == "v" and parts[1][1:].isdigit() and (
          not committed or parts[2] == "manifest.json"):
        out.add(int(parts[1][1:]))
    return sorted(out)

  def weight_versions(self) -> list[int]:
    """Versions whose manifest exists (committed), ascending."""
    return self._versions(committed=True)

  def weights_manifest(self, version: int) -> dict | None:
    key = f"weights/v{version:08d}/manifest.json"
    data, _ = self._read(key)
    try:
      return json.loads(data) if data is not None else None
    except ValueError:
      self._skip("weights", key, "manifest is not valid JSON")
      return None

  def fetch_weights(self, version: int, dest_dir: str) -> str | None:
    """Verified copy of version `version` in `dest_dir` (written atomically); None if corrupt."""
    manifest = self.weights_manifest(version)
    if manifest is None:
      return None
    cached = os.path.join(dest_dir, "manifest.json")
    if os.path.isfile(cached):
      with open(cached) as f:
        if json.load(f).get("files") == manifest["files"]:
          return dest_dir
      # The same version number from another run (a reused cache dir): replace it.
      shutil.rmtree(dest_dir, ignore_errors=True)
    tmp = f"{dest_dir.rstrip('/')}.tmp-{uuid.uuid4().hex[:8]}"
    os.makedirs(tmp)

    def get(name: str, meta: dict) -> bool:
      key = f"weights/v{version:08d}/{name}"
      dest = os.path.join(tmp, name)
      if self.local_root is not None:  # the bytes written are the bytes verified
        src = os.path.join(self.local_root, key)
        if not os.path.isfile(src):
          return False
        return _copy_hashed(src, dest) == (meta["size"], meta["sha256"])
      data, _ = self._read(key)
      if data is None or len(data) != meta["size"] or _sha(data) != meta["sha256"]:
        return False
      with open(dest, "wb") as f:
        f.write(data)
      return True

    items = list(manifest["files"].items())
    ok = list(_pool().map(lambda kv: get(*kv), items))
    if not all(ok):
      shutil.rmtree(tmp, ignore_errors=True)
      bad = [name for (name, _), good in zip(items, ok) if not good]
      self._skip("weights", f"weights/v{version:08d}/{bad[0]}",
                 "missing, truncated or checksum mismatch")
      return None
    with open(os.path.join(tmp, "manifest.json"), "w") as f:
      json.dump(manifest, f)
    os.makedirs(os.path.dirname(os.path.abspath(dest_dir)), exist_ok=True)
    try:
      os.rename(tmp, dest_dir)
    except OSError:  # another process fetched it first
      pass
    return dest_dir

  def latest_weights(self, dest_root: str, min_version: int = 0) -> tuple[int, str] | None:
    """(version, local dir) of the newest committed version that verifies, if >= min_version."""
    for v in reversed(self.weight_versions()):
      if v < min_version:
        return None
      path = self.fetch_weights(v, os.path.join(dest_root, f"v{v:08d}"))
      if path is not None:
        return v, path
    return None

  def _delete_prefix(self, prefix: str):
    """Deletes every key under `prefix` (which ends with '/')."""
    self.kv.delete_range(ts.KvStore.KeyRange(inclusive_min=prefix,
                                             exclusive_max=prefix[:-1] + "0")).result()

  def delete_weights(self, version: int):
    self._delete_prefix(f"weights/v{version:08d}/")
    if self.local_root is not None:  # the key-value store leaves the emptied directory behind
      shutil.rmtree(os.path.join(self.local_root, f"weights/v{version:08d}"), ignore_errors=True)

  def prune_weights(self, keep: int):
    """Keeps the newest `keep` committed versions; deletes older ones, and the leftovers of
    publishes that never committed if they are older than the oldest version kept."""
    keep = max(1, keep)
    committed = self.weight_versions()
    if len(committed) <= keep:
      return
    oldest_kept = committed[-keep]
    for v in self._versions(committed=False):
      if v < oldest_kept:
        self.delete_weights(v)

  # ---------------------------------------------------------------- requests
  def put_request(self, request: dict, request_id: str | None = None) -> str:
    """Writes a request; `request` holds prompts, n, sampling, min_version, per-prompt meta."""
    rid = request_id or uuid.uuid4().hex
    body = dict(request, id=rid)
    raw = json.dumps(body, sort_keys=True)
    self._write(f"requests/{rid}.json", json.dumps({"body": body, "sha256": _sha(raw.encode())
                                                    }).encode())
    return rid

  def _load_request(self, rid: str) -> dict | None:
    key = f"requests/{rid}.json"
    data, _ = self._read(key)
    if data is None:
      return None
    try:
      doc = json.loads(data)
      body = doc["body"]
      ok = _sha(json.dumps(body, sort_keys=True).encode()) == doc["sha256"]
    except (ValueError, KeyError, TypeError):
      ok = False
    if not ok:
      self._skip("request", key, "truncated or checksum mismatch")
      return None
    return body

  def request_ids(self) -> list[str]:
    return [k[len("requests/"):-len(".json")] for k in self._list("requests/")
            if k.endswith(".json")]

  def is_committed(self, rid: str) -> bool:
    return self._read(f"results/{rid}/manifest.json")[0] is not None

  def claim(self, worker: str, skip: set[str] | None = None) -> Claim | None:
    """Leases the first open request (no result yet, no live lease); None when there is none."""
    for rid in self.request_ids():
      if (skip and rid in skip) or self.is_committed(rid):
        continue
      lease_key = f"leases/{rid}.json"
      data, gen = self._read(lease_key)
      attempt = 0
      if data is not None:
        try:
          lease = json.loads(data)
          if lease["expires"] > time.time():
            continue  # someone holds it
          attempt = lease["attempt"] + 1
        except (ValueError, KeyError):
          attempt = 1  # a corrupt lease counts as expired
      request = self._load_request(rid)
      if request is None:
        continue
      lease = {"worker": worker, "attempt": attempt, "expires": time.time() + self.lease_seconds}
      # `gen` is the lease's generation, or the "no value" one when there is none: either way
      # the write succeeds only if nobody claimed it since we read it.
      new_gen = self._write(lease_key, json.dumps(lease).encode(), if_equal=gen)
      if new_gen:  # b"" means another worker won the race
        if attempt:
          self.stats["reclaimed"] += 1
        return Claim(rid, request, worker, attempt, new_gen)
    return None

  def heartbeat(self, claim: Claim) -> bool:
    """Renews the lease; False when it was lost (expired and taken over)."""
    lease = {"worker": claim.worker, "attempt": claim.attempt,
             "expires": time.time() + self.lease_seconds}
    gen = self._write(f"leases/{claim.request_id}.json", json.dumps(lease).encode(),
                      if_equal=claim.generation)
    if not gen:
      return False
    claim.generation = gen
    return True

  # ---------------------------------------------------------------- results
  def commit_result(self, claim: Claim, arrays: dict[str, np.ndarray], meta: dict) -> bool:
    """Data first, then the manifest only if none exists; False if another worker committed."""
    rid = claim.request_id
    data = encode_arrays(arrays)
    data_key = f"results/{rid}/data-{claim.attempt}-{claim.worker}.npz"
    self._write(data_key, data)
    manifest = dict(meta, request_id=rid, data_key=data_key, size=len(data), sha256=_sha(data),
                    worker=claim.worker, attempt=claim.attempt, committed=time.time())
    gen = self._write(f"results/{rid}/manifest.json", json.dumps(manifest).encode(),
                      if_equal=_NO_VALUE)
    if not gen:
      self._write(data_key, None)
      self.stats["lost_commit_race"] += 1
      return False
    self._write(f"leases/{rid}.json", None)
    return True

  def read_result(self, rid: str) -> tuple[dict, dict[str, np.ndarray]] | None:
    """(manifest, arrays) of a committed, verified result; None if absent or corrupt."""
    key = f"results/{rid}/manifest.json"
    data, _ = self._read(key)
    if data is None:
      return None
    try:
      manifest = json.loads(data)
      blob, _ = self._read(manifest["data_key"])
    except (ValueError, KeyError, TypeError):
      self._skip("result", key, "manifest is not valid")
      return None
    if blob is None or len(blob) != manifest["size"] or _sha(blob) != manifest["sha256"]:
      self._skip("result", key, "data missing, truncated or checksum mismatch")
      return None
    try:
      return manifest, decode_arrays(blob)
    except (ValueError, OSError) as e:
      self._skip("result", key, f"undecodable data: {e}")
      return None

  def retire(self, rid: str):
    """Removes a consumed (or unusable) request and everything under it."""
    self._write(f"requests/{rid}.json", None)
    self._write(f"leases/{rid}.json", None)
    self._delete_prefix(f"results/{rid}/")

  def requeue(self, rid: str):
    """Drops a corrupt result so that a worker generates the request again."""
    self._delete_prefix(f"results/{rid}/")
    self._write(f"leases/{rid}.json", None)
    self.stats["requeued"] += 1
