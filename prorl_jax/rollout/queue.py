"""The request queue on the exchange: requests/<id>.json, claimed through leases/<id>.json.

A request is `{body, sha256}` (a torn one is skipped, a malformed body quarantined). A worker
claims a request by writing its lease with compare-and-swap (`if_equal` on the storage
generation), renews it while it works, and commits through `commit`: a lease that is not renewed
expires and another worker takes the request over; a result committed after its request was
retired is deleted and counted. The trainer puts requests, waits for their results
(`wait_for_results`) and retires them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import uuid
from typing import Callable

import numpy as np

from prorl_jax.rollout.entries import (
  InvalidEntry,
  check_lease,
  check_request,
  is_plain_name,
  parse_object,
  require,
  safe_name,
)
from prorl_jax.rollout.results import ResultStore
from prorl_jax.rollout.store import KvStore, sha

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Claim:
  request_id: str
  request: dict
  worker: str
  attempt: int
  generation: bytes  # of our lease; renewing it is a compare-and-swap on this


class RequestQueue:
  """Requests, leases and the commit of their results, on one store."""

  def __init__(self, store: KvStore, results: ResultStore, lease_seconds: float = 60.0):
    self.store = store
    self.results = results
    self.lease_seconds = lease_seconds

  def put(self, request: dict, request_id: str | None = None) -> str:
    """Writes a request (`records.Request.to_json()`); returns its id."""
    rid = safe_name(request_id or uuid.uuid4().hex, "request id")
    body = check_request(dict(request, id=rid), rid)
    raw = json.dumps(body, sort_keys=True)
    self.store.write(
      f"requests/{rid}.json", json.dumps({"body": body, "sha256": sha(raw.encode())}).encode()
    )
    return rid

  def load(self, rid: str) -> dict | None:
    """The request's checked body; None if absent, torn (skipped) or malformed (quarantined)."""
    key = f"requests/{rid}.json"
    data, _ = self.store.read(key)
    if data is None:
      return None
    try:
      doc = parse_object(data)
      body = doc.get("body")
      require(isinstance(body, dict), "body must be an object")
      ok = sha(json.dumps(body, sort_keys=True).encode()) == doc.get("sha256")
    except InvalidEntry:
      ok = False
    if not ok:  # a half-written or torn request: skipped (its writer may still be writing it)
      self.store.skip("request", key, "truncated or checksum mismatch")
      return None
    try:
      return check_request(body, rid)
    except InvalidEntry as e:
      self.store.quarantine("request", key, data, str(e))
      return None

  def ids(self) -> list[str]:
    out = []
    for k in self.store.list("requests/"):
      rid = k[len("requests/") : -len(".json")] if k.endswith(".json") else None
      if rid is not None and is_plain_name(rid):
        out.append(rid)
    return out

  def has(self, rid: str) -> bool:
    return self.store.read(f"requests/{rid}.json")[0] is not None

  def _lease(self, rid: str) -> tuple[dict | None, bytes]:
    """(lease, generation); a malformed lease counts as expired (attempt kept when readable)."""
    key = f"leases/{rid}.json"
    data, gen = self.store.read(key)
    if data is None:
      return None, gen
    try:
      return check_lease(parse_object(data)), gen
    except InvalidEntry as e:
      self.store.stats["corrupt_lease"] += 1
      log.warning("exchange: lease %s is malformed (%s); treating it as expired", key, e)
      return {"worker": "", "attempt": 0, "expires": 0.0}, gen

  def claim(self, worker: str, skip: set[str] | None = None) -> Claim | None:
    """Leases the first open request (no result yet, no live lease); None when there is none."""
    safe_name(worker, "worker id")
    for rid in self.ids():
      if (skip and rid in skip) or self.results.committed(rid):
        continue
      lease, gen = self._lease(rid)
      attempt = 0
      if lease is not None:
        if lease["expires"] > time.time():
          continue  # someone holds it
        attempt = lease["attempt"] + 1
      request = self.load(rid)
      if request is None:
        continue
      new = {"worker": worker, "attempt": attempt, "expires": time.time() + self.lease_seconds}
      # `gen` is the lease's generation, or the "no value" one when there is none: either way
      # the write succeeds only if nobody claimed it since we read it.
      new_gen = self.store.write(f"leases/{rid}.json", json.dumps(new).encode(), if_equal=gen)
      if new_gen:  # b"" means another worker won the race
        if attempt:
          self.store.stats["reclaimed"] += 1
        return Claim(rid, request, worker, attempt, new_gen)
    return None

  def heartbeat(self, claim: Claim) -> bool:
    """Renews the lease; False when it was lost (expired and taken over, or retired)."""
    lease = {
      "worker": claim.worker,
      "attempt": claim.attempt,
      "expires": time.time() + self.lease_seconds,
    }
    gen = self.store.write(
      f"leases/{claim.request_id}.json", json.dumps(lease).encode(), if_equal=claim.generation
    )
    if not gen:
      return False
    claim.generation = gen
    return True

  def commit(self, claim: Claim, arrays: dict[str, np.ndarray], meta: dict) -> bool:
    """Commits the claimed request's result; False (and nothing left behind) if another worker
    committed, the lease was lost, or the request was retired meanwhile."""
    rid = claim.request_id
    if not self.heartbeat(claim) or not self.has(rid):
      self.store.stats["commit_after_retire"] += 1  # retired, or taken over after expiry
      log.warning(
        "exchange: %s lost its lease on %s (retired or taken over); not committing",
        claim.worker,
        rid,
      )
      return False
    if not self.results.commit(rid, claim.attempt, claim.worker, arrays, meta):
      return False
    if not self.has(rid):  # retired between our check and the commit: orphaned
      self.results.delete(rid)
      self.store.stats["commit_after_retire"] += 1
      return False
    self.store.write(f"leases/{rid}.json", None)
    return True

  def retire(self, rid: str):
    """Removes a consumed (or unusable) request and everything under it."""
    self.store.write(f"requests/{rid}.json", None)
    self.store.write(f"leases/{rid}.json", None)
    self.results.delete(rid)

  def requeue(self, rid: str):
    """Drops a corrupt result so that a worker generates the request again."""
    self.results.delete(rid)
    self.store.write(f"leases/{rid}.json", None)
    self.store.stats["requeued"] += 1


class WaitTimeout(RuntimeError):
  pass


class LostRequest(WaitTimeout):
  """A request with no result and no request file, and no record to put it again from."""


def _ensure_request(queue: RequestQueue, rid: str, bodies: dict | None, what: str) -> None:
  if queue.has(rid):
    return
  if bodies and rid in bodies:
    queue.put(bodies[rid], request_id=rid)
    queue.store.stats["reput"] += 1
    log.warning("exchange: request %s of %s was gone; put it again", rid, what)
    return
  raise LostRequest(
    f"waiting for {what}: request {rid} has no result and no request file on "
    f"{queue.store.url}, so no worker can produce it (a run killed while retiring it?)"
  )


def wait_for_results(
  queue: RequestQueue,
  rids: list[str],
  *,
  timeout_s: float,
  what: str,
  on_idle: Callable[[], str] | None = None,
  poll_s: float = 0.05,
  rows: dict[str, int] | None = None,
  bodies: dict[str, dict] | None = None,
) -> dict:
  """{rid: (manifest, arrays)} once every request has a verified result; raises on timeout.

  `rows[rid]`: the response rows request `rid` asks for (a result of another shape is
  malformed). Corrupt or malformed results are requeued (a worker redoes them). A request that
  has neither a result nor its request file (a run killed while retiring it, a quarantined
  request) can never be served: it is put again from `bodies[rid]` (the caller's record: same
  id, same seed), and without a record the wait stops at once with one line naming it. Logs
  what it waits for every 30 s.
  """
  done, t0, last_log = {}, time.time(), time.time()
  pending, url = list(rids), queue.store.url
  while pending:
    still = []
    for rid in pending:
      if queue.results.committed(rid):
        res = queue.results.read(rid, (rows or {}).get(rid))
        if res is None:
          queue.requeue(rid)
          _ensure_request(queue, rid, bodies, what)
          still.append(rid)
        else:
          done[rid] = res
      else:
        _ensure_request(queue, rid, bodies, what)
        still.append(rid)
    pending = still
    if not pending:
      break
    extra = on_idle() if on_idle else ""
    now = time.time()
    if now - t0 > timeout_s:
      raise WaitTimeout(
        f"timed out after {timeout_s:.0f}s waiting for {what}: "
        f"{len(pending)}/{len(rids)} results missing on {url} {extra}; "
        "are rollout workers running (rollout.local_workers, or external "
        "workers on this exchange)?"
      )
    if now - last_log > 30:
      log.info(
        "waiting for %s: %d/%d results on %s %s",
        what,
        len(rids) - len(pending),
        len(rids),
        url,
        extra,
      )
      last_log = now
    time.sleep(poll_s)
  return done
