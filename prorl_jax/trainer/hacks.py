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
  share whose moving average rose past RISE x its baseline + FLOOR (once, until it falls back)."""

  def __init__(self):
    self.first: dict[str, list[float]] = {}
    self.avg: dict[str, float] = {}
    self.warned: set[str] = set()

  def observe(self, step: int, metrics: dict) -> list[str]:
    lines = []
    for key in sorted(k for k in metrics if k.startswith(PREFIX)):
      share = float(metrics[key])
      self.avg[key] = share if key not in self.avg else ALPHA * share + (1 - ALPHA) * self.avg[key]
      first = self.first.setdefault(key, [])
      if len(first) < WARMUP:
        first.append(share)
        continue
      base = sum(first) / len(first)
      high = self.avg[key] > max(FLOOR, RISE * base + FLOOR)
      if high and key not in self.warned:
        self.warned.add(key)
        lines.append(
          f"step {step}: {key[len(PREFIX) :]} flagged in {self.avg[key]:.0%} of responses "
          f"(moving average; {base:.0%} over the first {WARMUP} steps): the policy may be "
          "learning a reward hack; read the flagged responses (prorl-plot draws hacks/)"
        )
      elif not high:
        self.warned.discard(key)
    return lines
