"""A model served for evaluation: a private exchange in a temporary directory with the model
published as version 0, and local workers on it (as many, and placed, as the config's
`rollout.*` asks; at least one). `prorl-eval` on a config's held-out set and the suite runner
both score through it."""

from __future__ import annotations

import os
import tempfile

from prorl_jax.config.workers import local_workers
from prorl_jax.rollout.exchange import Exchange


class ServedModel:
  """`ex`: the private exchange (weights version 0 = the model); `workers`: its local workers
  (`workers.check` is the `on_idle` of a wait). `close()` stops the workers and removes it all;
  usable as a context manager."""

  def __init__(self, cfg, model_dir: str):
    self.tmp = tempfile.TemporaryDirectory(prefix="prorl_eval_")
    url = f"file://{self.tmp.name}/exchange"
    self.ex = Exchange(url)
    self.ex.weights.publish(0, 0, model_dir)
    try:
      self.workers, _ = local_workers(
        cfg, url, os.path.join(self.tmp.name, "workers"), self.ex.queue.release, at_least_one=True
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
