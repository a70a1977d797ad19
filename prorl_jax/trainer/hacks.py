"""The hack monitor: per data source, the share of each step's responses that the red team's
detectors flag (`rewards.detectors`: filler, restatement, look-alikes, invisible characters,
special numbers, constant programs, response errors), logged as `hacks/{source}/{flag}` beside
the reward, drawn by `prorl-plot`, and a warning when a share rises well above where the run
started: a policy learning a verifier's blind spot shows here before it shows in the reward."""

from __future__ import annotations

import logging

log = logging.getLogger("prorl_jax.trainer")

PREFIX = "hacks/"
WARMUP = 5  # steps whose mean is a share's baseline
FLOOR = 0.05  # a share under this never warns
RISE = 2.0  # warn when the share's moving average passes RISE x baseline (+ FLOOR)
ALPHA = 0.3  # weight of the newest step in the moving average


def shares(counts: dict) -> dict[str, float]:
  """`{source}/flagged/{flag}` counts over `{source}/scored` -> {hacks/{source}/{flag}: share}."""
  out = {}
  for key, n in counts.items():
    if "/flagged/" in key:
      source, flag = key.rsplit("/flagged/", 1)
      out[f"{PREFIX}{source}/{flag}"] = n / max(counts.get(f"{source}/scored", 0), n, 1)
  return out


class HackMonitor:
  """Follows every `hacks/` share of the step metrics; `observe` returns a warning line for a
  share whose moving average rose past RISE x its baseline + FLOOR (once, until it falls back).
  A share absent from a step's metrics is 0 there (workers send only the flags they saw), so a
  flag that appears after steps without it starts from a zero history: its rise from zero warns."""

  def __init__(self):
    self.first: dict[str, list[float]] = {}
    self.avg: dict[str, float] = {}
    self.warned: set[str] = set()
    self.steps = 0  # steps observed so far

  def _seen(self, key: str, share: float) -> None:
    if key not in self.avg:  # zero until now: the steps before it count as 0
      self.first[key] = [0.0] * min(self.steps, WARMUP)
      self.avg[key] = share if not self.steps else ALPHA * share
    else:
      self.avg[key] = ALPHA * share + (1 - ALPHA) * self.avg[key]

  def observe(self, step: int, metrics: dict) -> list[str]:
    now = {k: float(v) for k, v in metrics.items() if k.startswith(PREFIX)}
    lines = []
    for key in sorted(set(now) | set(self.avg)):
      share = now.get(key, 0.0)
      self._seen(key, share)
      first = self.first[key]
      if self.steps < WARMUP:  # the run's first steps: every share's baseline
        first.append(share)
        continue
      lines += self._check(step, key, sum(first) / len(first))
    self.steps += 1
    return lines

  def _check(self, step: int, key: str, base: float) -> list[str]:
    high = self.avg[key] > max(FLOOR, RISE * base + FLOOR)
    if not high:
      self.warned.discard(key)
      return []
    if key in self.warned:
      return []
    self.warned.add(key)
    return [
      f"step {step}: {key[len(PREFIX) :]} flagged in {self.avg[key]:.0%} of responses "
      f"(moving average; {base:.0%} over the first {WARMUP} steps): the policy may be "
      "learning a reward hack; read the flagged responses (prorl-plot draws hacks/)"
    ]
