"""The trainer <-> rollout-worker exchange: weights, a request queue with leases, and results,
each behind its own small interface over one store.

  ex.weights   rollout/weights.py   weights/v00000007/<file>, weights/v00000007/manifest.json
  ex.queue     rollout/queue.py     requests/<id>.json, leases/<id>.json; wait_for_results
  ex.results   rollout/results.py   results/<id>/data-<attempt>-<worker>.npz, .../manifest.json
  ex.store     rollout/store.py     the storage: a directory (`file://`), `gs://`, `memory://`

Commit protocol, everywhere: data first, a checksummed manifest last. A reader trusts only a
manifest and verifies sizes and sha256; half-written or corrupt entries are skipped, logged and
counted, never consumed.

Nothing read from the store is trusted before it is checked (`rollout/entries.py`; any process
that can write the store is treated as hostile): every file name, request id and worker id must
be one plain path component (letters, digits, `._-`, not starting with a dot), so no key or
local path built from an entry can leave its directory; local copies never follow symlinks and
are hashed under a temp name, renamed into place only when size and sha256 match; every JSON
entry (weights manifest, request, lease, result manifest) is checked against its schema, and a
result's arrays against theirs (shapes agree, scores finite and in [0, 1]). An entry that fails
is moved under `quarantine/` (kept for inspection), logged and counted in `stats`; the reader
keeps going.
"""

from __future__ import annotations

from prorl_jax.rollout.queue import LEASE_SECONDS, RequestQueue
from prorl_jax.rollout.results import ResultStore
from prorl_jax.rollout.store import open_store
from prorl_jax.rollout.weights import WeightStore


class Exchange:
  """One handle on the exchange at `url`; safe to use from many processes at once."""

  def __init__(self, url: str, lease_seconds: float = LEASE_SECONDS):
    self.url = url
    self.store = open_store(url)
    self.stats = self.store.stats  # what every part skipped, quarantined, reclaimed, ...
    self.weights = WeightStore(self.store)
    self.results = ResultStore(self.store)
    self.queue = RequestQueue(self.store, self.results, lease_seconds)
