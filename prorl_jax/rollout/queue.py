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

from prorl_jax.records import Request, Result
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
  request: Request
  worker: str
  attempt: int
  generation: bytes  # of our lease; renewing it is a compare-and-swap on this


# How long a claim holds without a heartbeat (a worker beats every third of it): past it, a
# request whose worker died or hung is served by another.
LEASE_SECONDS = 60.0


class RequestQueue:
  """Requests, leases and the commit of their results, on one store."""

  def __init__(self, store: KvStore, results: ResultStore, lease_seconds: float = LEASE_SECONDS):
    self.store = store
    self.results = results
    self.lease_seconds = lease_seconds

  def put(self, request: Request, request_id: str | None = None) -> str:
    """Writes a request; returns its id."""
    if not isinstance(request, Request):
      raise TypeError(
        f"RequestQueue.put takes a records.Request, not {type(request).__name__} "
        "(Request.from_json(body) reads a JSON body)"
      )
    rid = safe_name(request_id or uuid.uuid4().hex, "request id")
    body = dict(request.to_json(), id=rid)
    check_request(body, rid)  # what a worker will accept, refused here first
    raw = json.dumps(body, sort_keys=True)
    self.store.write(
      f"requests/{rid}.json", json.dumps({"body": body, "sha256": sha(raw.encode())}).encode()
    )
    return rid

  def load(self, rid: str) -> Request | None:
    """The request `rid`, checked; None if absent, torn (skipped) or malformed (quarantined)."""
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

  def claim(
    self, worker: str, skip: set[str] | None = None, accept: Callable[[Request], bool] | None = None
  ) -> Claim | None:
    """Leases the first open request (no result yet, no live lease) that `accept` (when given)
    takes; None when there is none."""
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
      if request is None or (accept is not None and not accept(request)):
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

  def commit(self, claim: Claim, result: Result) -> bool:
    """Commits the claimed request's result, as the claim's worker and attempt; False (and
    nothing left behind) if another worker committed, the lease was lost, or the request was
    retired meanwhile."""
    rid = claim.request_id
    result = dataclasses.replace(result, worker=claim.worker, attempt=claim.attempt)
    if not self.heartbeat(claim) or not self.has(rid):
      self.store.stats["commit_after_retire"] += 1  # retired, or taken over after expiry
      log.warning(
        "exchange: %s lost its lease on %s (retired or taken over); not committing",
        claim.worker,
        rid,
      )
      return False
    if not self.results.commit(rid, result):
      return False
    if not self.has(rid):  # retired between our check and the commit: orphaned
      self.results.delete(rid)
      self.store.stats["commit_after_retire"] += 1
      return False
    self.store.write(f"leases/{rid}.json", None)
    return True

  def retire(self, rid: str):
    """Removes a consumed (or unusable) request and everything under it: the request file first
    (no worker claims it again meanwhile), then its lease, the result's manifest and its data. A
    late duplicate attempt that commits meanwhile finds the request gone and removes its result
    itself. A cut in between leaves keys without a request, which the next `reconcile` retires
    (or, for a request the resumed run expects, puts again from scratch)."""
    self.store.write(f"requests/{rid}.json", None)
    self.store.write(f"leases/{rid}.json", None)
    self.store.write(f"results/{rid}/manifest.json", None)
    self.results.delete(rid)

  def known_ids(self) -> set[str]:
    """Every id with a request, a lease or a result key on the exchange."""
    out = set(self.ids())
    for prefix, cut in (("leases/", ".json"), ("results/", None)):
      for k in self.store.list(prefix):
        rest = k[len(prefix) :]
        rid = rest[: -len(cut)] if cut and rest.endswith(cut) else rest.split("/")[0]
        if is_plain_name(rid):
          out.add(rid)
    return out

  def reconcile(self, expected: dict[str, Request]) -> dict[str, int]:
    """Makes the exchange hold what a resumed trainer expects and nothing else: every request of
    `expected` ({id: request}, the checkpoint's record of requests in flight) ends pending, or with
    a verified result of that same body; one that is missing, torn, malformed or of another body
    is put again (same id, same body, so the same seed), and a pending one's lease is dropped (its
    worker belonged to the interrupted run: a live one loses the lease at its next renewal and
    does not commit); every other request, lease and result (the interrupted run's leftovers) is
    retired. Returns {kept, pending, put, retired}."""
    counts = {"kept": 0, "pending": 0, "put": 0, "retired": 0}
    for rid in sorted(self.known_ids() - set(expected)):
      self.retire(rid)
      counts["retired"] += 1
    for rid, want in expected.items():
      stored = self.load(rid)
      if stored is None or stored.canonical() != want.canonical():
        # missing, torn, or another request under this id: from scratch (a result without its
        # request is of no known body: dropped too)
        self.retire(rid)
        stored = None
      elif self.results.committed(rid) and self.results.read(rid) is None:
        self.requeue(rid)  # a torn or malformed result: generated again
      if stored is None:
        self.put(want, request_id=rid)
        counts["put"] += 1
      if self.results.committed(rid):
        counts["kept"] += 1
      else:  # a lease of the interrupted run's worker (dead, or soon to lose it): free now
        self.store.write(f"leases/{rid}.json", None)
        counts["pending"] += 1
    if counts["put"] or counts["retired"]:
      log.info(
        "exchange: resumed with %d requests of the checkpoint (%d with results, %d put again); "
        "retired %d left by the interrupted run",
        len(expected),
        counts["kept"],
        counts["put"],
        counts["retired"],
      )
    return counts

  def release(self, worker: str) -> int:
    """Expires every lease `worker` holds (it is known dead: its requests are open again now, not
    when the leases run out; the attempt count is kept, so the next attempt's data key is new).
    A lease taken over meanwhile is left alone (compare-and-swap on its generation). Returns how
    many were expired."""
    dropped = 0
    for k in self.store.list("leases/"):
      rid = k[len("leases/") : -len(".json")] if k.endswith(".json") else ""
      if not is_plain_name(rid):
        continue
      lease, gen = self._lease(rid)
      if lease is not None and lease["worker"] == worker and lease["expires"] > 0:
        if self.store.write(k, json.dumps(dict(lease, expires=0.0)).encode(), if_equal=gen):
          dropped += 1
    if dropped:
      self.store.stats["released"] += dropped
      log.info("exchange: expired %d leases of the dead worker %s", dropped, worker)
    return dropped

  def requeue(self, rid: str):
    """Drops a corrupt result so that a worker generates the request again."""
    self.results.delete(rid)
    self.store.write(f"leases/{rid}.json", None)
    self.store.stats["requeued"] += 1


class WaitTimeout(RuntimeError):
  pass


class LostRequest(WaitTimeout):
  """A request with no result and no request file, and no record to put it again from."""


def _ensure_request(
  queue: RequestQueue, rid: str, requests: dict | None, what: str, verify: bool = False
) -> None:
  """Puts request `rid` again from `requests` when it is gone (or, `verify`, torn or malformed:
  no worker could serve it); without a record, raises LostRequest."""
  if queue.has(rid) and (not verify or queue.load(rid) is not None):
    return
  if requests and rid in requests:
    queue.put(requests[rid], request_id=rid)
    queue.store.stats["reput"] += 1
    log.warning("exchange: request %s of %s was gone; put it again", rid, what)
    return
  raise LostRequest(
    f"waiting for {what}: request {rid} has no result and no readable request file on "
    f"{queue.store.url}, so no worker can produce it (a run killed while writing or retiring it?)"
  )


def wait_for_results(
  queue: RequestQueue,
  rids: list[str],
  *,
  timeout_s: float,
  what: str,
  on_idle: Callable[[], str] | None = None,
  poll_s: float = 0.05,
  requests: dict[str, Request] | None = None,
  rows: dict[str, int] | None = None,
) -> dict[str, Result]:
  """{rid: result} once every request has a verified result; raises on timeout.

  `requests`: the caller's record of the requests; a result must have as many rows as its
  request asks for (or `rows[rid]`, without a record), else it is malformed. Corrupt or
  malformed results are requeued (a worker redoes them). A request that has no result and no
  request file a worker can read (gone, torn, quarantined) can never be served: it is put again
  from `requests[rid]` (the caller's record: same id, same seed), and without a record the wait
  stops at once with one line naming it. Logs what it waits for every 30 s.
  """
  rows = dict(rows or {}, **{rid: r.rows for rid, r in (requests or {}).items()})
  done, t0, last_log, last_verify = {}, time.time(), time.time(), 0.0
  pending, url = list(rids), queue.store.url
  while pending:
    still = []
    verify = time.time() - last_verify > 1.0  # that a pending request can be served, each second
    if verify:
      last_verify = time.time()
    for rid in pending:
      if queue.results.committed(rid):
        res = queue.results.read(rid, rows.get(rid))
        if res is None:
          queue.requeue(rid)
          _ensure_request(queue, rid, requests, what, verify=True)
          still.append(rid)
        else:
          done[rid] = res
      else:
        _ensure_request(queue, rid, requests, what, verify=verify)
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
