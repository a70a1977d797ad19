"""A model served for evaluation: a private exchange in a temporary directory with the model
published as version 0, and local workers on it (`start_workers`: the config's, made by
`trainer.workers.eval_workers`). `prorl-eval` on a config's held-out set and the suite runner
both score through it."""

from __future__ import annotations

import shutil
import tempfile

from prorl_jax.rollout.exchange import Exchange


class ServedModel:
  """`ex`: the private exchange (weights version 0 = the model); `workers`: its local workers
  (`workers.check` is the `on_idle` of a wait). `close()` stops the workers and removes the
  exchange; usable as a context manager. The workers' logs go to `log_dir` (kept), else to a
  directory of their own that a clean exit removes and a failure keeps, so the log an error
  names is still there to read."""

  def __init__(self, model_dir: str, start_workers, log_dir: str | None = None):
    """`start_workers(url, log_dir, on_death)` starts the workers (at least one) on the exchange
    at `url` and returns them."""
    self.tmp = tempfile.TemporaryDirectory(prefix="prorl_eval_")
    self.own_logs = log_dir is None
    self.log_dir = log_dir or tempfile.mkdtemp(prefix="prorl_eval_workers_")
    url = f"file://{self.tmp.name}/exchange"
    self.ex = Exchange(url)
    self.ex.weights.publish(0, 0, model_dir)
    try:
      self.workers = start_workers(url, self.log_dir, self.ex.queue.release)
    except BaseException:
      self.tmp.cleanup()
      raise

  def close(self, failed: bool = False):
    self.workers.stop()
    self.tmp.cleanup()
    if self.own_logs and not failed:
      shutil.rmtree(self.log_dir, ignore_errors=True)

  def __enter__(self) -> ServedModel:
    return self

  def __exit__(self, exc_type, *exc):
    self.close(failed=exc_type is not None)
