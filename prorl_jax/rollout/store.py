"""The exchange's storage: one key-value interface, one implementation per kind of store.

`open_store(url)` gives a `LocalStore` for a directory (`file:///dir/` or a plain path) and a
`KvStore` for anything else tensorstore opens (`gs://bucket/path/`, `memory://` in tests). Both
read, write (optionally compare-and-swap on the storage generation), list and delete keys
through tensorstore; they differ only in how whole files move (`put_file`, `get_file`):

- `KvStore` reads a file into memory and writes its bytes as one key (and back).
- `LocalStore` copies files with the kernel, hashing each chunk on the way, and renames a copy
  into place only when its size and sha256 match; it never follows a symlink.

Every store also counts and logs what its readers skip or quarantine (`stats`).
"""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import logging
import os
import stat
import uuid

import tensorstore as ts

log = logging.getLogger(__name__)

NO_VALUE = b"\x02"  # tensorstore's storage generation of a missing key
_CHUNK_BYTES = 1 << 20
_WRITE_TRIES = 5


class InvalidExchange(ValueError):
  """An exchange URL that cannot be opened (a user-fixable setting)."""


def sha(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def _normalise(url: str) -> str:
  if "://" not in url:
    url = "file://" + os.path.abspath(url)
  return url if url.endswith("/") else url + "/"


class KvStore:
  """A tensorstore key-value store; whole files travel as the bytes of one key."""

  def __init__(self, url: str, kv: ts.KvStore):
    self.url = url
    self.kv = kv
    self.stats: collections.Counter = collections.Counter()

  # ---------------------------------------------------------------- keys
  def read(self, key: str) -> tuple[bytes | None, bytes]:
    """(value or None, storage generation)."""
    r = self.kv.read(key).result()
    return (r.value, r.stamp.generation) if r.state == "value" else (None, r.stamp.generation)

  def write(self, key: str, value: bytes | None, if_equal: bytes | None = None) -> bytes:
    """Writes (None deletes); with `if_equal`, only if the key's generation is still that one
    (NO_VALUE: only if absent). Returns the new generation, b"" when the condition failed."""
    if if_equal is None:
      return self.kv.write(key, value).result().generation
    return self.kv.write(key, value, if_equal=if_equal).result().generation

  def list(self, prefix: str) -> list[str]:
    rng = ts.KvStore.KeyRange(
      inclusive_min=prefix, exclusive_max=prefix[:-1] + chr(ord(prefix[-1]) + 1)
    )
    return sorted(k.decode() for k in self.kv.list(rng).result())

  def delete_prefix(self, prefix: str):
    """Deletes every key under `prefix` (which ends with '/')."""
    self.kv.delete_range(
      ts.KvStore.KeyRange(inclusive_min=prefix, exclusive_max=prefix[:-1] + "0")
    ).result()

  # ---------------------------------------------------------------- whole files
  def put_file(self, key: str, src: str) -> tuple[int, str]:
    """Stores the regular file `src` (not a symlink) at `key`; (size, sha256) of what it
    stored."""
    with open(_open_regular(src), "rb") as f:
      data = f.read()
    self.write(key, data)
    return len(data), sha(data)

  def put_marker(self, key: str, data: bytes):
    """Writes an entry whose readers verify what it lists (a weights manifest)."""
    self.write(key, data)

  def get_file(self, key: str, dest: str, want: tuple[int, str]) -> bool:
    """Copies `key` to the local file `dest` if its (size, sha256) is `want`; False (and no
    file at `dest`) otherwise."""
    data, _ = self.read(key)
    if data is None or (len(data), sha(data)) != tuple(want):
      return False
    write_file(dest, data)
    return True

  # ---------------------------------------------------------------- what readers refuse
  def skip(self, what: str, key: str, why: str):
    """Counts and logs an entry passed over (torn or corrupt: its writer may still be busy)."""
    self.stats[f"skipped_{what}"] += 1
    log.warning("exchange: skipping %s %s: %s", what, key, why)

  def quarantine(self, what: str, key: str, data: bytes | None, why: str):
    """Moves a malformed entry to quarantine/<key> (kept for inspection) and counts it."""
    self.stats[f"quarantined_{what}"] += 1
    log.warning("exchange: quarantined %s %s: %s", what, key, why)
    if data is not None:
      self.write(f"quarantine/{key}", data)
    self.write(key, None)


class LocalStore(KvStore):
  """A directory: files are copied by the kernel and hashed on the way."""

  def __init__(self, url: str, kv: ts.KvStore, root: str):
    super().__init__(url, kv)
    self.root = root

  def put_file(self, key: str, src: str) -> tuple[int, str]:
    # Readers verify size and sha256, so no fsync is needed.
    return copy_hashed(src, os.path.join(self.root, key))

  def put_marker(self, key: str, data: bytes):
    # Written and renamed into place like the files (tensorstore's file store would also fsync
    # it: ~1 ms, a tenth of publishing a small model, for a marker whose files readers verify).
    write_file(os.path.join(self.root, key), data)

  def get_file(self, key: str, dest: str, want: tuple[int, str]) -> bool:
    """See `KvStore.get_file`; never through a symlinked directory."""
    src = os.path.join(self.root, key)
    # Where the file must really be: a symlinked directory on the way resolves elsewhere.
    if os.path.realpath(os.path.dirname(src)) != os.path.join(
      os.path.realpath(self.root), os.path.dirname(key)
    ):
      return False
    try:
      return copy_hashed(src, dest, want) is not None
    except OSError:
      return False

  def write(self, key: str, value: bytes | None, if_equal: bytes | None = None) -> bytes:
    # A write whose directory another process's `delete_prefix` removed between the write's
    # mkdir and its lock file fails NOT_FOUND before it has written anything: tried again.
    """See `KvStore.write`."""
    for _ in range(_WRITE_TRIES - 1):
      try:
        return super().write(key, value, if_equal)
      except ValueError as e:
        if not str(e).startswith("NOT_FOUND"):
          raise
    return super().write(key, value, if_equal)

  def delete_prefix(self, prefix: str):
    # Key by key, then the emptied directories: tensorstore's range delete (like a recursive
    # remove) also deletes the lock files of writes in flight under the prefix, and those writes
    # then fail in their own process (a worker committing a result while the trainer retires it).
    """See `KvStore.delete_prefix`."""
    for key in self.list(prefix):
      self.write(key, None)
    for path, _, _ in os.walk(os.path.join(self.root, prefix), topdown=False):
      try:
        os.rmdir(path)  # only if empty: a write in flight keeps its directory
      except OSError:
        pass


def open_store(url: str) -> KvStore:
  """The store at `url`; a URL tensorstore cannot open is an InvalidExchange with one line."""
  norm = _normalise(url)
  try:
    kv = ts.KvStore.open(norm).result()
  except ValueError as e:
    raise InvalidExchange(
      f"exchange {url!r}: {str(e).splitlines()[0]}; use a directory, file:///DIR or "
      "gs://BUCKET/PATH"
    ) from None
  if norm.startswith("file://"):
    return LocalStore(url, kv, norm[len("file://") :])
  return KvStore(url, kv)


# -------------------------------------------------------------------- local files
def _open_regular(path: str) -> int:
  """A read fd on `path` if it is a regular file and not a symlink (raises OSError otherwise)."""
  fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
  if not stat.S_ISREG(os.fstat(fd).st_mode):
    os.close(fd)
    raise OSError(f"{path} is not a regular file")
  return fd


def copy_hashed(
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


def hash_file(path: str) -> tuple[int, str] | None:
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


def write_file(dest: str, data: bytes):
  """Writes `dest` under a temp name, then renames it into place."""
  os.makedirs(os.path.dirname(dest), exist_ok=True)
  tmp = f"{dest}.tmp-{uuid.uuid4().hex[:8]}"
  with open(tmp, "wb") as f:
    f.write(data)
  os.replace(tmp, dest)


_POOL: concurrent.futures.ThreadPoolExecutor | None = None


def io_pool() -> concurrent.futures.ThreadPoolExecutor:
  """Threads for per-file copies and hashes (both release the GIL, so files go in parallel);
  one pool per process: starting threads per call cost more than hashing a small model."""
  global _POOL
  if _POOL is None:
    _POOL = concurrent.futures.ThreadPoolExecutor(
      2 * (os.cpu_count() or 1), thread_name_prefix="exchange-io"
    )
  return _POOL
