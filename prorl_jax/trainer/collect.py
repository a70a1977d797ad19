"""The step's batch from the exchange (`loop.run` drives it): `collect` fills the step's batch of
informative groups (dynamic sampling with refill and carry-over, within `rollout.max_staleness`),
`prefetch` puts the next step's requests ahead (the pipelined loop); `Received` is what came
back, `Collected` what `collect` returns."""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import time
from typing import NamedTuple

import numpy as np

from prorl_jax.algo import dynamic_sampling
from prorl_jax.records import Group, Prefetch, PromptItem, PromptMeta, Request
from prorl_jax.rollout import probe
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.rollout.queue import wait_for_results
from prorl_jax.trainer import batch, hacks
from prorl_jax.trainer.plan import RolloutPlan

log = logging.getLogger("prorl_jax.trainer.loop")


def admissible(version: int, policy_version: int, max_staleness: int) -> bool:
  """A result is trained on only if sampled by one of the last `max_staleness`+1 versions (a
  version from the future comes from an interrupted run and is never admitted)."""
  return 0 <= version - policy_version <= max_staleness


def _requests(
  p: RolloutPlan, items: list[PromptItem], *, step: int, tag: str, version: int
) -> dict[str, Request]:
  """The request bodies of one round over `items`, split so every worker gets a share; their
  ids name the step and round (a resumed run writes the same ids and seeds again)."""
  k = len(items)
  # Requests of at most one round's share per worker: a prefetch of several rounds is several
  # requests of the usual size (one compiled sampler shape; a refill waits for one at most).
  per = max(1, -(-min(k, p.prompts_per_step) // p.requests_per_round))
  out = {}
  for j in range(0, k, per):
    part = items[j : j + per]
    rid = f"s{step:07d}-{tag}-c{j:05d}"
    out[rid] = Request(
      prompts=[[int(t) for t in it.prompt_ids] for it in part],
      n=p.n,
      sampling=p.sampling,
      meta=[PromptMeta.of_item(it) for it in part],
      seed=(p.seed * 1_000_003 + step * 1009 + _round_salt(tag) * 31 + j) % 2**31,
      min_version=max(0, version - (0 if p.pipeline else p.max_staleness)),
      # in-flight updates: a worker may move to any version published while it generates (the
      # trainer publishes none newer than its own; admission judges by the oldest tokens)
      max_version=None if p.inflight_updates else version,
      routing=dict(p.routing),
    )
  return out


def _round_salt(tag: str) -> int:
  """A round's seed salt: g00, g01, ... are the rounds 0, 1, ...; the prefetched round is -1."""
  return -1 if tag == "p" else int(tag[1:])


def _put(ex: Exchange, requests: dict[str, Request]) -> None:
  for rid, req in requests.items():
    ex.queue.put(req, request_id=rid)


@dataclasses.dataclass
class Received:
  """What one step's waits for results saw, added to by each `_receive`: results dropped as too
  stale, verifier failures, the time waited (by the trainer, and by the workers for weights),
  the verifiers' per-request counts and the engine/trainer probe mismatch."""

  stale_dropped: int = 0
  failed_groups: int = 0  # fewer than two samples judged: the group is dropped
  failed_samples: int = 0
  wait_s: float = 0.0
  workers_wait_s: float = 0.0
  inflight_tokens: int = 0  # tokens drawn by a version newer than their result's (in-flight)
  weight_swaps: int | None = None  # in-flight swaps the engines reported (None: none report)
  peak_kv_bytes: float | None = None  # the largest paged KV cache a request needed
  verifier: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  probe_max: float | None = None  # the worst mismatch of the step
  probe_mean: float | None = None  # the last result's mean

  def probe(self, mm: dict) -> None:
    if mm:
      self.probe_max = max(self.probe_max or 0.0, mm["max"])
      self.probe_mean = mm["mean"]

  def info(self) -> dict:
    """The step metrics these make (every verifier count under verifier/)."""
    out = {
      "sampling/stale_dropped": self.stale_dropped,
      "sampling/verifier_failed_groups": self.failed_groups,
      "sampling/verifier_failed_samples": self.failed_samples,
      "rewards/response_errors": sum(
        v for k, v in self.verifier.items() if k.endswith("/response_errors")
      ),
      "time/wait_rollouts_s": self.wait_s,
      "time/workers_wait_weights_s": self.workers_wait_s,
      "sampling/inflight_tokens": self.inflight_tokens,
    }
    out.update({f"verifier/{k}": v for k, v in self.verifier.items()})
    out.update(hacks.shares(self.verifier))
    if self.weight_swaps is not None:
      out["engine/weight_swaps"] = self.weight_swaps
    if self.peak_kv_bytes is not None:
      out["engine/peak_kv_mib"] = self.peak_kv_bytes / 2**20
    if self.probe_max is not None:
      out.update({"mismatch/probe_max": self.probe_max, "mismatch/probe_mean": self.probe_mean})
    return out


def _receive(
  p: RolloutPlan, ex: Exchange, on_idle, requests: dict[str, Request], step, version, got: Received
):
  """Waits for the results of `requests`; their admissible, verified groups (what the wait saw
  is added to `got`)."""
  t0 = time.time()
  done = wait_for_results(
    ex.queue,
    list(requests),
    timeout_s=p.timeout_s,
    what=f"rollouts of step {step}",
    on_idle=on_idle,
    requests=requests,
  )
  got.wait_s += time.time() - t0
  groups = []
  for rid, req in requests.items():
    result = done[rid]
    ex.queue.retire(rid)
    if not admissible(version, result.policy_version, p.max_staleness):
      got.stale_dropped += 1  # never train on results beyond the staleness bound
      continue
    got.probe(probe.reported_mismatch(result, p.max_probe_mismatch))
    got.workers_wait_s += result.weights_wait_s or 0.0
    es = result.engine_stats
    if es.weight_swaps is not None:
      got.weight_swaps = (got.weight_swaps or 0) + es.weight_swaps
    if es.peak_kv_bytes is not None:
      got.peak_kv_bytes = max(got.peak_kv_bytes or 0.0, es.peak_kv_bytes)
    if result.versions is not None:
      live = np.arange(result.tokens.shape[1])[None, :] < result.lengths[:, None]
      got.inflight_tokens += int(np.sum(live & (result.versions > result.policy_version)))
    got.verifier.update(result.verifier_stats)  # per-request counts: "code/scored" -> count
    for g in batch.results_to_groups(rid, req, result):
      got.failed_samples += int(np.sum(g.verifier_failed))
      g = batch.without_failed_samples(g)  # a verifier's fault drops samples, not the group
      if g is None:
        got.failed_groups += 1
        continue
      groups.append(g)
  return groups


def prefetch(
  p: RolloutPlan, source, ex: Exchange, *, step: int, version: int, rounds: int = 1
) -> Prefetch:
  """Pipelined loop: step `step`'s first `rounds` rounds of prompts (enough that dynamic sampling
  rarely has to refill: `dynamic_sampling.prefetch_rounds`) go out now, sampled with weights
  `version` (the newest published), so the workers generate while the trainer updates. Returns the
  prefetch record for the loop state (a checkpoint stores it; a resumed run writes its requests
  again)."""
  items = source.take(p.prompts_per_step * rounds)
  requests = _requests(p, items, step=step, tag="p", version=version)
  _put(ex, requests)
  return Prefetch(step=step, version=version, rounds=rounds, requests=requests)


def _take_prefetched(ex: Exchange, pf: Prefetch | None, step: int) -> Prefetch | None:
  """The prefetch record `pf` if it is step `step`'s; None without one,
  or when its weights version is gone from the exchange (its requests are retired and the step
  generates fresh). A resumed run has put its requests again (`RequestQueue.reconcile`); one
  lost since is put again by the wait."""
  if not pf or pf.step != step:
    return None
  if pf.version not in ex.weights.versions():
    log.warning(
      "the prefetched rollouts of step %d need weights v%d, which the exchange no longer "
      "holds; generating them again with the current weights",
      step,
      pf.version,
    )
    for rid in pf.requests:
      ex.queue.retire(rid)
    return None
  return pf


class Collected(NamedTuple):
  """A step's batch: its informative `groups`, the `metrics` of their gathering, and the value
  that steers the loop, `keep_rate`: the share of this step's newly generated groups (prefetched
  ones too) that were kept, which sizes the next prefetches (None when none were generated). A
  tuple, so that it crosses `dist.broadcast` as plain data."""

  groups: list[Group]
  metrics: dict
  keep_rate: float | None


def collect(
  p: RolloutPlan,
  source,
  buffer: dynamic_sampling.GroupBuffer,
  ex: Exchange,
  on_idle,
  *,
  step: int,
  version: int,
  prefetched: Prefetch | None = None,
) -> Collected:
  """Fills step `step`'s batch of informative groups (dynamic sampling with refill): prompts
  from `source`, groups carried over in `buffer` (both advance), the results of the prefetch
  record `prefetched` first; `on_idle` is called while it waits (checks the workers, and raises
  to abandon the wait)."""
  rounds, got = itertools.count(), Received()

  def generate():
    items = source.take(p.prompts_per_step)
    requests = _requests(p, items, step=step, tag=f"g{next(rounds):02d}", version=version)
    _put(ex, requests)
    return _receive(p, ex, on_idle, requests, step, version, got)

  # Carry-over groups were sampled for the previous step: one version older than fresh ones.
  expired = buffer.evict(lambda g: not admissible(version, g.policy_version, p.max_staleness + 1))
  prefetched = _take_prefetched(ex, prefetched, step)
  kept_prefetched, got_prefetched, carried = 0, 0, len(buffer)  # carried: from earlier steps
  if prefetched:  # sampled while the previous step trained
    received = _receive(p, ex, on_idle, prefetched.requests, step, version, got)
    got_prefetched = len(received)
    kept_prefetched = buffer.add(received, filter_uninformative=p.dynamic_sampling)
  groups, stats = dynamic_sampling.gather_groups(
    buffer,
    generate,
    p.prompts_per_step,
    max_rounds=p.max_gen_rounds,
    dynamic_sampling=p.dynamic_sampling,
  )
  generated = got_prefetched + stats.groups_generated
  keep_rate = (kept_prefetched + stats.groups_kept) / generated if generated else None
  info = {
    "sampling/rounds": stats.rounds,
    "sampling/keep_rate": stats.keep_rate,
    "sampling/groups_kept": stats.groups_kept,
    "sampling/short": float(stats.short),
    "sampling/carry_over": min(carried, p.prompts_per_step),
    "sampling/buffer": len(buffer),
    "sampling/carry_over_expired": expired,
    **got.info(),
  }
  if keep_rate is not None:
    info["sampling/keep_rate_all"] = keep_rate
  if p.pipeline:
    info["pipeline/prefetched_kept"] = kept_prefetched
  info.update(_staleness(groups, version))
  return Collected(groups, info, keep_rate)


def _staleness(groups: list[Group], version: int) -> dict:
  """How many versions behind `version` the groups were sampled: the mean, and the count at
  each lag."""
  if not groups:
    return {}
  lag = [version - g.policy_version for g in groups]
  return {"sampling/staleness": float(np.mean(lag))} | {
    f"staleness/{d}": lag.count(d) for d in range(max(lag) + 1)
  }
