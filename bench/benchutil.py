"""Helpers shared by the benchmarks: median wall time and model FLOPs per token."""

from __future__ import annotations

import statistics
import time


def median_time(fn, reps: int = 3) -> float:
  """Median seconds of `reps` calls of `fn`, after one untimed call (compile / warm-up)."""
  fn()
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return statistics.median(times)


def model_flops_per_token(cfg, seq: int) -> int:
  """6·N for the matmul weights (embedding lookup excluded) + attention scores/values."""
  n = cfg.num_params - (0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size)
  return 6 * n + 12 * cfg.num_layers * seq * cfg.num_heads * cfg.head_dim
