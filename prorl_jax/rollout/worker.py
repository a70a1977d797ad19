"""The rollout worker (its command: `python -m prorl_jax.cli.worker --exchange=URL`).

Loads the newest committed weights, claims requests (leases), generates n responses per prompt,
scores them with the reward verifiers, commits results (data first, manifest last), reloads when
a newer weight version commits, stops cleanly on SIGTERM (after the request in hand) and is safe
to kill -9 (its lease expires and another worker redoes the request).

A request is a `records.Request` (JSON on the exchange): prompts, n, sampling parameters, seed,
the weight versions it may use, and per prompt the data_source that names its verifier.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import threading
import time

import numpy as np

from prorl_jax.model.tokenizer import load_tokenizer
from prorl_jax.records import Generation, PromptMeta, Result
from prorl_jax.rewards.common import THINK_OPEN, template_opens_think
from prorl_jax.rewards.pool import VerifierPool
from prorl_jax.rollout import adapters
from prorl_jax.rollout.engines import Engine
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.rollout.probe import check_probe
from prorl_jax.rollout.queue import Claim

log = logging.getLogger("prorl_jax.worker")

INFLIGHT_NEEDS = (
  "--inflight_updates needs an engine that swaps weights mid-generation: the JAX engine with "
  """continuous batching (--engine=jax --engine_options='{"batching": "continuous"}')"""
)


def end_token_ids(tokenizer, stop_token_ids=()) -> frozenset[int]:
  """The ids that end a response: the sampling's stop tokens and the tokenizer's end of
  sequence (a padding token the model drew inside its length is text it wrote, not an end)."""
  ids = set(stop_token_ids)
  v = getattr(tokenizer, "eos_token_id", None)
  ids.update(v if isinstance(v, (list, tuple)) else [v] if isinstance(v, int) else [])
  return frozenset(ids)


def special_texts(tokenizer) -> list[str]:
  """The tokenizer's special tokens as text, longest first."""
  return sorted({s for s in getattr(tokenizer, "all_special_tokens", ()) if s}, key=len)[::-1]


def response_text(tokenizer, tokens, length: int, ends: frozenset[int], specials=None) -> str:
  """The text a verifier judges: the response's tokens up to (not including) the first end
  token, decoded with the think tags kept, and any special token text left at its end removed
  (an engine that stops on a token the request did not list, or pads, leaves one there).
  `specials`: `special_texts(tokenizer)`, computed once by a caller that decodes many."""
  toks = [int(t) for t in tokens[:length]]
  cut = next((i for i, t in enumerate(toks) if t in ends), len(toks))
  text = tokenizer.decode(toks[:cut], skip_special_tokens=False)
  specials = special_texts(tokenizer) if specials is None else specials
  stripped = None
  while stripped != text:
    stripped, text = text, text.rstrip()
    for s in specials:
      if text.endswith(s):
        text = text[: -len(s)]
        break
  return text


def counts_since(stats: dict, before: dict) -> dict:
  """The verifier pool's counts of one request (`{source}/scored`, `{source}/flagged/{flag}`,
  ...): its counters now less what they were before it, the zeros left out."""
  return {k: v - before.get(k, 0) for k, v in stats.items() if v - before.get(k, 0)}


def prompt_text(tokenizer, ids) -> str:
  """A prompt's text as a verifier reads it: decoded without the template's special tokens, and
  ending with `<think>` where the template opened the think block (kept even when a tokenizer
  marks the tag special), so the verifier knows the response starts inside its reasoning."""
  text = tokenizer.decode(ids, skip_special_tokens=True)
  tail = tokenizer.decode(list(ids)[-8:], skip_special_tokens=False).rstrip()
  if tail.endswith(THINK_OPEN) and not template_opens_think(text):
    text = text.rstrip() + THINK_OPEN + "\n"
  return text


def score_rows(
  tokenizer,
  gen: Generation,
  n: int,
  meta: list[PromptMeta],
  pool: VerifierPool,
  routing=None,
  prompts: list | None = None,
  stop_token_ids=(),
):
  """Decodes each response (up to its first end token: `response_text`) and scores it in the
  verifier pool: scores, failed flags, reasons. With `prompts` (token ids), each verifier also
  gets its prompt's text as `prompt_text` (`prompt_text()`): from it a verifier reads whether the
  response starts inside a think block the template opened, and the instruction-following
  verifier refuses a response that restates it."""
  texts = [prompt_text(tokenizer, p) for p in prompts] if prompts else None
  ends, specials = end_token_ids(tokenizer, stop_token_ids), special_texts(tokenizer)
  jobs = []
  for r in range(len(gen.lengths)):
    m = meta[r // n]
    text = response_text(tokenizer, gen.tokens[r], int(gen.lengths[r]), ends, specials)
    extra = m.extra if texts is None else {**m.extra, "prompt_text": texts[r // n]}
    jobs.append((m.data_source, text, m.reference, extra))
  res = pool.score_many(jobs, routing)
  return (
    np.asarray([s.value for s in res], np.float32),
    np.asarray([s.failed for s in res], bool),
    [s.reason for s in res],
  )


class FetchedWeights:
  """A worker's weight source on the exchange: the newest committed version in a request's
  range, fetched (verified) into `cache_dir`, loaded into the worker's engine and checked
  against the version's probe (the engine/trainer mismatch its results report)."""

  def __init__(self, cache_dir: str):
    self.cache_dir = cache_dir
    self.bases: dict[str, str] = {}  # a LoRA run's base id -> its copy, verified once here

  def reload(self, w: Worker, min_version: int = 0, max_version: int | None = None) -> bool:
    """Loads the newest committed version in [min_version, max_version] into `w` if it is not
    loaded; whether it did."""
    versions = [
      v
      for v in w.ex.weights.versions()
      if v >= min_version and (max_version is None or v <= max_version)
    ]
    if not versions or versions[-1] == w.version:
      return False
    if max_version is None and versions[-1] < w.version:
      return False
    version = versions[-1]
    path = w.ex.weights.fetch(version, os.path.join(self.cache_dir, f"v{version:08d}"))
    if path is None:
      return False
    self.prune(keep={version, w.version})
    t0 = time.time()
    base = adapters.base_of(path)
    if base is None:  # a whole model
      w.engine.load(path)
    elif (base_dir := self._base(w, base)) is None:
      return False
    else:  # a LoRA run's adapters over its base
      w.engine.load_adapted(base_dir, path)
    w.tokenizer = load_tokenizer(path if base is None else base_dir)
    w.version = version
    w.mismatch = self.check_probe(w.engine, path)
    log.info("worker %s: loaded weights v%d in %.2fs", w.id, version, time.time() - t0)
    return True

  def _base(self, w: Worker, base: str) -> str | None:
    """The verified local copy of base `base` (fetched the first time; None: not on the
    exchange or corrupt, counted there)."""
    if base not in self.bases:
      got = w.ex.weights.fetch_base(base, os.path.join(self.cache_dir, f"base-{base}"))
      if got is None:
        return None
      self.bases[base] = got
    return self.bases[base]

  def prune(self, keep: set[int]):
    """Removes cached weight versions other than `keep` (the newest and the loaded one) and
    leftovers of interrupted fetches."""
    for name in os.listdir(self.cache_dir) if os.path.isdir(self.cache_dir) else []:
      path = os.path.join(self.cache_dir, name)
      stem = name.split(".", 1)[0]  # v<N>, and v<N>.merged: a LoRA version made whole
      is_version = stem[:1] == "v" and stem[1:].isdigit() and ".tmp" not in name
      if (is_version and int(stem[1:]) not in keep) or (name[:1] == "v" and ".tmp" in name):
        if os.path.islink(path) or not os.path.isdir(path):
          os.remove(path)
        else:
          shutil.rmtree(path, ignore_errors=True)

  @staticmethod
  def check_probe(engine: Engine, path: str) -> dict | None:
    """|engine − trainer| log-prob on the version's probe sequences (the mismatch guard)."""
    cached = engine.last_mismatch  # the vLLM engine checks on load
    if cached is not None:
      return cached
    return check_probe(engine.score_tokens, path)


class Worker:
  """The loop of one rollout worker on an exchange: load the newest weights the exchange has
  committed, claim a request, generate with `engine`, score in `pool`, commit the result (data
  first, manifest last), repeat. A lost lease drops the work (another worker has it); SIGTERM
  sets `stop`, heeded after the request in hand."""

  def __init__(
    self,
    exchange: Exchange,
    engine: Engine,
    cache_dir: str,
    worker_id: str,
    poll_s: float = 0.2,
    pool: VerifierPool | None = None,
    inflight_updates: bool = False,
    weights=None,
  ):
    """`inflight_updates`: load a newer committed version between the engine's device calls
    (within the request's max_version) and generate on with it; every token records the
    version that drew it (the result's `versions`). `weights`: where its weights come from
    (`reload(worker, min_version, max_version)`); by default `FetchedWeights(cache_dir)`."""
    if inflight_updates and not engine.inflight_updates:
      raise ValueError(INFLIGHT_NEEDS)
    self.inflight_updates = inflight_updates
    self._last_look = 0.0
    self.ex, self.engine, self.id = exchange, engine, worker_id
    self.weights = weights if weights is not None else FetchedWeights(cache_dir)
    self.pool = pool or VerifierPool(processes=1)
    self.poll_s = poll_s
    self.version = -1
    self.tokenizer = None
    self.stop = threading.Event()
    self.done = 0
    self.parent_pid: int | None = None  # exit when this process (a local trainer) dies
    self.mismatch: dict | None = None
    self.weights_wait_s = 0.0
    # Called between the engine's device calls (continuous batching); may raise to abandon the
    # request in hand (the trainer's inline worker when the run is asked to stop).
    self.interrupt = None

  def maybe_reload(self, min_version: int = 0, max_version: int | None = None) -> bool:
    """Loads the newest version in [min_version, max_version] its weight source has, if it is
    not loaded; whether it did."""
    return self.weights.reload(self, min_version, max_version)

  def _newer_weights(self, max_version: int | None) -> int | None:
    """Between decode chunks: first `interrupt()` (when set; it may raise), then with in-flight
    updates the version just loaded if a newer one (within the request's max_version) has
    committed, else None; looks at the exchange at most every poll_s."""
    if self.interrupt is not None:
      self.interrupt()
    if not self.inflight_updates:
      return None
    now = time.monotonic()
    if now - self._last_look < self.poll_s:
      return None
    self._last_look = now
    return self.version if self.maybe_reload(self.version + 1, max_version) else None

  def _heartbeat(self, claim: Claim, lost: threading.Event, finished: threading.Event):
    while not finished.wait(self.ex.queue.lease_seconds / 3):
      if not self.ex.queue.heartbeat(claim):
        lost.set()
        return

  def serve_one(self, claim: Claim) -> bool:
    """Serves one claimed request: generate, score, commit, heartbeating the lease meanwhile;
    False when the lease was lost (another worker has the request) or the commit lost its race."""
    req = claim.request
    finished, lost = threading.Event(), threading.Event()
    beat = threading.Thread(target=self._heartbeat, args=(claim, lost, finished), daemon=True)
    beat.start()
    try:
      t0 = time.time()
      sampling = req.sampling.stopping_at(self.tokenizer.eos_token_id)
      start_version = self.version  # the result's policy_version: its oldest tokens' weights
      inflight = {}
      if self.inflight_updates or (self.interrupt is not None and self.engine.inflight_updates):
        inflight["between_chunks"] = functools.partial(self._newer_weights, req.max_version)
        inflight["version"] = start_version  # what the tokens drawn before any swap record
      gen = self.engine.generate(req.prompts, req.n, sampling, req.seed, **inflight)
      t1 = time.time()
      before = dict(self.pool.stats)
      scores, failed, reasons = score_rows(
        self.tokenizer,
        gen,
        req.n,
        req.meta,
        self.pool,
        req.routing,
        req.prompts,
        sampling.stop_token_ids,
      )
      t2 = time.time()
    finally:
      finished.set()
      beat.join()
    if lost.is_set():
      log.warning("worker %s: lost the lease of %s; dropping the work", self.id, claim.request_id)
      return False
    result = Result(
      tokens=gen.tokens,
      logprobs=gen.logprobs,
      lengths=gen.lengths,
      stopped=gen.stopped,
      scores=scores,
      verifier_failed=failed,
      policy_version=start_version,
      probe_mismatch=self.mismatch,
      verifier_stats=counts_since(self.pool.stats, before),
      weights_wait_s=self.weights_wait_s,  # claimed, waiting for the request's weights
      engine_stats=gen.stats,
      versions=gen.versions,
      generate_s=t1 - t0,
      score_s=t2 - t1,
      reasons=tuple(reasons),
    )
    committed = self.ex.queue.commit(claim, result)
    log.info(
      "worker %s served %s: %d prompts x %d, %d tokens in %.2fs (weights v%d)",
      self.id,
      claim.request_id,
      len(req.prompts),
      req.n,
      int(np.sum(gen.lengths)),
      t2 - t0,
      self.version,
    )
    return committed

  def _orphaned(self) -> bool:
    return self.parent_pid is not None and os.getppid() != self.parent_pid

  def run(
    self,
    max_requests: int | None = None,
    idle_exit_s: float | None = None,
    no_weights_warn_s: float = 60.0,
  ):
    """The worker's loop: follow the newest weights, claim and serve requests until `stop` is
    set, `max_requests` are served, no request came for `idle_exit_s`, or the parent process is
    gone."""
    idle_since = time.time()
    backoff = self.poll_s
    next_warning = time.time() + no_weights_warn_s
    while not self.stop.is_set():
      if self._orphaned():
        log.warning("worker %s: parent %d is gone; exiting", self.id, self.parent_pid)
        return
      self.maybe_reload()
      if self.version < 0 and time.time() >= next_warning:
        log.warning(
          "worker %s: no committed weights on %s after %.0fs; is --exchange the "
          "trainer's rollout.exchange (default RUN_DIR/exchange)?",
          self.id,
          self.ex.url,
          time.time() - idle_since,
        )
        next_warning = time.time() + no_weights_warn_s
      claim = self.ex.queue.claim(self.id) if self.version >= 0 else None
      if claim is None:
        if idle_exit_s is not None and time.time() - idle_since > idle_exit_s:
          return
        time.sleep(backoff)  # back off while idle: polling steals CPU from a local trainer
        backoff = min(backoff * 1.5, max(self.poll_s, 0.1))
        continue
      backoff = self.poll_s
      lo, hi = claim.request.min_version, claim.request.max_version
      t_wait = time.time()
      while not (lo <= self.version and (hi is None or self.version <= hi)):
        if self.stop.is_set() or self._orphaned():
          return
        if not self.maybe_reload(lo, hi):
          self.ex.queue.heartbeat(claim)
          time.sleep(self.poll_s)
      self.weights_wait_s = time.time() - t_wait
      if self.serve_one(claim):
        self.done += 1
      idle_since = time.time()
      if max_requests is not None and self.done >= max_requests:
        return
