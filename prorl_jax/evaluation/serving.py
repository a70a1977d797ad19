"""A model served for evaluation: a private exchange in a temporary directory with the model
published as version 0, and local workers on it (`start_workers`: the config's, made by
`config.workers.eval_workers`). `prorl-eval` on a config's held-out set and the suite runner
both score through it."""

from __future__ import annotations

import os
import tempfile

from prorl_jax.rollout.exchange import Exchange


class ServedModel:
  """`ex`: the private exchange (weights version 0 = the model); `workers`: its local workers
  (`workers.check` is the `on_idle` of a wait). `close()` stops the workers and removes it all;
  usable as a context manager."""

  def __init__(self, model_dir: str, start_workers):
    """`start_workers(url, log_dir, on_death)` starts the workers (at least one) on the exchange
    at `url` and returns them."""
    self.tmp = tempfile.TemporaryDirectory(prefix="prorl_eval_")
    url = f"file://{self.tmp.name}/exchange"
    self.ex = Exchange(url)
    self.ex.weights.publish(0, 0, model_dir)
    try:
      self.workers = start_workers(
        url, os.path.join(self.tmp.name, "workers"), self.ex.queue.release
      )
    except BaseException:
      self.tmp.cleanup()
      raise

  def close(self):
    self.workers.stop()
    self.tmp.cleanup()

  def __enter__(self) -> ServedModel:
    return self

  def __exit__(self, *exc):
    self.close()
