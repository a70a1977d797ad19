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
consumed.

Nothing read from the store is trusted before it is checked (`rollout/entries.py`; any process
that can write the store is treated as hostile): every file name, request id and worker id must
be one plain path component (letters, digits, `._-`, not starting with a dot), so no key or
local path built from an entry can leave its directory; local copies never follow symlinks and
are hashed under a temp name, renamed into place only when size and sha256 match; every JSON
entry (weights manifest, request, lease, result manifest) is checked against its schema, and a
result's arrays against theirs (shapes agree, scores finite and in [0, 1]). An entry that fails
is moved under `quarantine/` (kept for inspection), logged and counted in `stats`; the reader
keeps going. A result committed after its request was retired is deleted and counted.

Claims are leases written with compare-and-swap (`if_equal` on the storage generation): a lease
that is not renewed expires and another worker takes the request over. The result manifest is
created with "only if absent", so two workers never both commit a request.
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
import stat
import time
import uuid

import numpy as np
import tensorstore as ts

from prorl_jax.rollout.entries import (
  InvalidEntry,
  check_lease,
  check_request,
  check_result_arrays,
  check_result_manifest,
  check_weights_manifest,
  is_plain_name,
  parse_object,
  require,
  safe_name,
)

log = logging.getLogger(__name__)

_NO_VALUE = b"\x02"  # tensorstore's storage generation of a missing key


def _sha(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def _normalise(url: str) -> str:
  if "://" not in url:
    url = "file://" + os.path.abspath(url)
  return url if url.endswith("/") else url + "/"


def open_kvstore(url: str) -> ts.KvStore:
  """`file:///dir/`, `gs://bucket/path/`, `memory://`, or a plain directory path; a URL
  tensorstore cannot open is an InvalidExchange with one line."""
  try:
    return ts.KvStore.open(_normalise(url)).result()
  except ValueError as e:
    raise InvalidExchange(
      f"exchange {url!r}: {str(e).splitlines()[0]}; use a directory, file:///DIR or "
      "gs://BUCKET/PATH"
    ) from None


class InvalidExchange(ValueError):
  """An exchange URL that cannot be opened (a user-fixable setting)."""


_CHUNK_BYTES = 1 << 20


def _open_regular(path: str) -> int:
  """A read fd on `path` if it is a regular file and not a symlink (raises OSError otherwise)."""
  fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
  if not stat.S_ISREG(os.fstat(fd).st_mode):
    os.close(fd)
    raise OSError(f"{path} is not a regular file")
  return fd


def _copy_hashed(
  src: str, dest: str, expect: tuple[int, str] | None = None
) -> tuple[int, str] | None:
  """Copies `src` to `dest` under a temp name and sha256s the bytes on the way; renames it into
  place (and returns (size, sha256)) only if it matches `expect`, else removes it and returns
  None. Never follows a symlink at `src`. Each chunk is hashed while it is in cache and written
  from the same buffer, so the file is read once (an in-kernel copy plus a separate hash read it
  twice; publishing went from ~0.48 to ~0.56 of a raw copy's speed: bench/RESULTS.md)."""
  os.makedirs(os.path.dirname(dest), exist_ok=True)
  tmp = f"{dest}.tmp-{uuid.uuid4().hex[:8]}"
  digest, buf = hashlib.sha256(), bytearray(_CHUNK_BYTES)
  view, size = memoryview(buf), 0
  try:
    with open(_open_regular(src), "rb", buffering=0) as f, open(tmp, "xb", buffering=0) as out:
      while n := f.readinto(buf):
        digest.update(view[:n])
        done = 0
        while done < n:
          done += out.write(view[done:n])
        size += n
        if expect is not None and size > expect[0]:
          break  # longer than the manifest says: no need to read the rest
    got = (size, digest.hexdigest())
    if expect is not None and got != tuple(expect):
      os.remove(tmp)
      return None
    os.replace(tmp, dest)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise
  return got


def _hash_file(path: str) -> tuple[int, str] | None:
  """(size, sha256) of a regular file (not a symlink), None if it cannot be read."""
  digest, size = hashlib.sha256(), 0
  try:
    with open(_open_regular(path), "rb", buffering=0) as f:
      while chunk := f.read(_CHUNK_BYTES):
        digest.update(chunk)
        size += len(chunk)
  except OSError:
    return None
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
    _POOL = concurrent.futures.ThreadPoolExecutor(
      2 * (os.cpu_count() or 1), thread_name_prefix="exchange-io"
    )
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
    self.local_root = norm[len("file://") :] if norm.startswith("file://") else None
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
    rng = ts.KvStore.KeyRange(
      inclusive_min=prefix, exclusive_max=prefix[:-1] + chr(ord(prefix[-1]) + 1)
    )
    return sorted(k.decode() for k in self.kv.list(rng).result())

  def _skip(self, what: str, key: str, why: str):
    self.stats[f"skipped_{what}"] += 1
    log.warning("exchange: skipping %s %s: %s", what, key, why)

  def _quarantine(self, what: str, key: str, data: bytes | None, why: str):
    """Moves a malformed entry to quarantine/<key> (kept for inspection) and counts it."""
    self.stats[f"quarantined_{what}"] += 1
    log.warning("exchange: quarantined %s %s: %s", what, key, why)
    if data is not None:
      self._write(f"quarantine/{key}", data)
    self._write(key, None)

  # ---------------------------------------------------------------- weights
  def publish_weights(self, version: int, step: int, src_dir: str) -> dict:
    """Copies every file of `src_dir` to weights/v<version>/ (files in parallel, each hashed
    beside its copy), then writes the manifest."""
    prefix = f"weights/v{version:08d}/"
    # A fetched or published version directory has its own manifest: ours replaces it.
    names = [
      n
      for n in sorted(os.listdir(src_dir))
      if os.path.isfile(os.path.join(src_dir, n)) and n != "manifest.json"
    ]
    if not names:
      raise ValueError(
        f"publish_weights: {src_dir} holds no files; give it a saved model "
        "directory (safetensors + config.json)"
      )
    for n in names:
      try:
        safe_name(n, "file")
      except InvalidEntry as e:
        raise ValueError(f"publish_weights: {src_dir}: {e}; rename or remove it") from None

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
      _write_file(
        os.path.join(self.local_root, prefix + "manifest.json"), json.dumps(manifest).encode()
      )
    else:
      self._write(prefix + "manifest.json", json.dumps(manifest).encode())
    return manifest

  def _versions(self, committed: bool) -> list[int]:
    """Versions with any key under weights/v<N>/ (or, if `committed`, with a manifest)."""
    out = set()
    for key in self._list("weights/"):
      parts = key.split("/")
      if (
        len(parts) == 3
        and parts[1][:1] == "v"
        and parts[1][1:].isdigit()
        and (not committed or parts[2] == "manifest.json")
      ):
        out.add(int(parts[1][1:]))
    return sorted(out)

  def weight_versions(self) -> list[int]:
    """Versions whose manifest exists (committed), ascending."""
    return self._versions(committed=True)

  def weights_manifest(self, version: int) -> dict | None:
    """The version's manifest, schema-checked; a malformed one is quarantined (None)."""
    key = f"weights/v{version:08d}/manifest.json"
    data, _ = self._read(key)
    if data is None:
      return None
    try:
      return check_weights_manifest(parse_object(data), version)
    except InvalidEntry as e:
      self._quarantine("weights", key, data, str(e))
      return None

  def _verified_cache(self, dest_dir: str, manifest: dict) -> bool:
    """True when `dest_dir` holds exactly the manifest's files with their sizes and sha256."""
    try:
      names = set(os.listdir(dest_dir)) - {"manifest.json"}
    except OSError:
      return False
    if names != set(manifest["files"]):
      return False
    got = _pool().map(lambda n: _hash_file(os.path.join(dest_dir, n)), sorted(names))
    return all(
      g == (manifest["files"][n]["size"], manifest["files"][n]["sha256"])
      for n, g in zip(sorted(names), got)
    )

  def fetch_weights(self, version: int, dest_dir: str) -> str | None:
    """Verified copy of version `version` in `dest_dir` (written atomically); None if corrupt.

    A copy already in `dest_dir` is hashed again before it is reused (a cache is local disk
    that anything may have changed); one that does not match is replaced."""
    manifest = self.weights_manifest(version)
    if manifest is None:
      return None
    if os.path.lexists(dest_dir):
      if not os.path.islink(dest_dir) and self._verified_cache(dest_dir, manifest):
        return dest_dir
      # Another run's version of that number, or a damaged copy: replace it.
      self.stats["cache_replaced"] += 1
      if os.path.islink(dest_dir):
        os.remove(dest_dir)
      else:
        shutil.rmtree(dest_dir, ignore_errors=True)
    tmp = f"{dest_dir.rstrip('/')}.tmp-{uuid.uuid4().hex[:8]}"
    os.makedirs(tmp)
    prefix = f"weights/v{version:08d}/"
    # Where the version's files must really be: a symlinked directory on the way resolves
    # elsewhere and is refused.
    root = os.path.join(os.path.realpath(self.local_root), prefix) if self.local_root else None

    def get(name: str, meta: dict) -> bool:
      key = prefix + name
      dest = os.path.join(tmp, name)  # `name` is one plain component (checked)
      want = (meta["size"], meta["sha256"])
      if self.local_root is not None:  # the bytes written are the bytes verified
        src = os.path.join(self.local_root, key)
        if os.path.realpath(os.path.dirname(src)) != root.rstrip("/"):
          return False  # the version directory is a symlink to elsewhere
        try:
          return _copy_hashed(src, dest, want) is not None
        except OSError:
          return False
      data, _ = self._read(key)
      if data is None or (len(data), _sha(data)) != want:
        return False
      _write_file(dest, data)
      return True

    items = list(manifest["files"].items())
    ok = list(_pool().map(lambda kv: get(*kv), items))
    if not all(ok):
      shutil.rmtree(tmp, ignore_errors=True)
      bad = [name for (name, _), good in zip(items, ok) if not good]
      self._skip("weights", prefix + bad[0], "missing, truncated, a symlink or checksum mismatch")
      return None
    with open(os.path.join(tmp, "manifest.json"), "w") as f:
      json.dump(manifest, f)
    os.makedirs(os.path.dirname(os.path.abspath(dest_dir)), exist_ok=True)
    try:
      os.rename(tmp, dest_dir)
    except OSError:  # another process fetched it first: use theirs only if it verifies
      shutil.rmtree(tmp, ignore_errors=True)
      if not self._verified_cache(dest_dir, manifest):
        return None
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
    self.kv.delete_range(
      ts.KvStore.KeyRange(inclusive_min=prefix, exclusive_max=prefix[:-1] + "0")
    ).result()

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
    rid = safe_name(request_id or uuid.uuid4().hex, "request id")
    body = check_request(dict(request, id=rid), rid)
    raw = json.dumps(body, sort_keys=True)
    self._write(
      f"requests/{rid}.json", json.dumps({"body": body, "sha256": _sha(raw.encode())}).encode()
    )
    return rid

  def _load_request(self, rid: str) -> dict | None:
    key = f"requests/{rid}.json"
    data, _ = self._read(key)
    if data is None:
      return None
    try:
      doc = parse_object(data)
      body = doc.get("body")
      require(isinstance(body, dict), "body must be an object")
      ok = _sha(json.dumps(body, sort_keys=True).encode()) == doc.get("sha256")
    except InvalidEntry:
      ok = False
    if not ok:  # a half-written or torn request: skipped (its writer may still be writing it)
      self._skip("request", key, "truncated or checksum mismatch")
      return None
    try:
      return check_request(body, rid)
    except InvalidEntry as e:
      self._quarantine("request", key, data, str(e))
      return None

  def request_ids(self) -> list[str]:
    out = []
    for k in self._list("requests/"):
      rid = k[len("requests/") : -len(".json")] if k.endswith(".json") else None
      if rid is not None and is_plain_name(rid):
        out.append(rid)
    return out

  def has_request(self, rid: str) -> bool:
    return self._read(f"requests/{rid}.json")[0] is not None

  def is_committed(self, rid: str) -> bool:
    return self._read(f"results/{rid}/manifest.json")[0] is not None

  def _lease(self, rid: str) -> tuple[dict | None, bytes]:
    """(lease, generation); a malformed lease counts as expired (attempt kept when readable)."""
    key = f"leases/{rid}.json"
    data, gen = self._read(key)
    if data is None:
      return None, gen
    try:
      return check_lease(parse_object(data)), gen
    except InvalidEntry as e:
      self.stats["corrupt_lease"] += 1
      log.warning("exchange: lease %s is malformed (%s); treating it as expired", key, e)
      return {"worker": "", "attempt": 0, "expires": 0.0}, gen

  def claim(self, worker: str, skip: set[str] | None = None) -> Claim | None:
    """Leases the first open request (no result yet, no live lease); None when there is none."""
    safe_name(worker, "worker id")
    for rid in self.request_ids():
      if (skip and rid in skip) or self.is_committed(rid):
        continue
      lease_key = f"leases/{rid}.json"
      lease, gen = self._lease(rid)
      attempt = 0
      if lease is not None:
        if lease["expires"] > time.time():
          continue  # someone holds it
        attempt = lease["attempt"] + 1
      request = self._load_request(rid)
      if request is None:
        continue
      new = {"worker": worker, "attempt": attempt, "expires": time.time() + self.lease_seconds}
      # `gen` is the lease's generation, or the "no value" one when there is none: either way
      # the write succeeds only if nobody claimed it since we read it.
      new_gen = self._write(lease_key, json.dumps(new).encode(), if_equal=gen)
      if new_gen:  # b"" means another worker won the race
        if attempt:
          self.stats["reclaimed"] += 1
        return Claim(rid, request, worker, attempt, new_gen)
    return None

  def heartbeat(self, claim: Claim) -> bool:
    """Renews the lease; False when it was lost (expired and taken over, or retired)."""
    lease = {
      "worker": claim.worker,
      "attempt": claim.attempt,
      "expires": time.time() + self.lease_seconds,
    }
    gen = self._write(
      f"leases/{claim.request_id}.json", json.dumps(lease).encode(), if_equal=claim.generation
    )
    if not gen:
      return False
    claim.generation = gen
    return True

  # ---------------------------------------------------------------- results
  def commit_result(self, claim: Claim, arrays: dict[str, np.ndarray], meta: dict) -> bool:
    """Data first, then the manifest only if none exists; False (and nothing left behind) if
    another worker committed, the lease was lost, or the request was retired meanwhile."""
    rid = claim.request_id
    if not self.heartbeat(claim) or not self.has_request(rid):
      self.stats["commit_after_retire"] += 1  # retired, or taken over after our lease expired
      log.warning(
        "exchange: %s lost its lease on %s (retired or taken over); not committing",
        claim.worker,
        rid,
      )
      return False
    data = encode_arrays(arrays)
    data_key = f"results/{rid}/data-{claim.attempt}-{claim.worker}.npz"
    self._write(data_key, data)
    manifest = dict(
      meta,
      request_id=rid,
      data_key=data_key,
      size=len(data),
      sha256=_sha(data),
      worker=claim.worker,
      attempt=claim.attempt,
      committed=time.time(),
    )
    gen = self._write(
      f"results/{rid}/manifest.json", json.dumps(manifest).encode(), if_equal=_NO_VALUE
    )
    if not gen:
      self._write(data_key, None)
      self.stats["lost_commit_race"] += 1
      return False
    if not self.has_request(rid):  # retired between our check and the commit: orphaned
      self._delete_prefix(f"results/{rid}/")
      self.stats["commit_after_retire"] += 1
      return False
    self._write(f"leases/{rid}.json", None)
    return True

  def read_result(
    self, rid: str, rows: int | None = None
  ) -> tuple[dict, dict[str, np.ndarray]] | None:
    """(manifest, arrays) of a committed, verified result (`rows`: the rows the request asked
    for); None if absent, corrupt (skipped) or malformed (quarantined)."""
    key = f"results/{rid}/manifest.json"
    data, _ = self._read(key)
    if data is None:
      return None
    try:
      manifest = check_result_manifest(parse_object(data), rid)
    except InvalidEntry as e:
      self._quarantine("result", key, data, str(e))
      return None
    blob, _ = self._read(manifest["data_key"])
    if blob is None or len(blob) != manifest["size"] or _sha(blob) != manifest["sha256"]:
      self._skip("result", key, "data missing, truncated or checksum mismatch")
      return None
    try:
      return manifest, check_result_arrays(decode_arrays(blob), rows)
    except Exception as e:  # noqa: BLE001 - hostile bytes may fail to decode in any way
      self._quarantine("result", manifest["data_key"], blob, f"malformed data: {e}")
      self._write(key, None)
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
