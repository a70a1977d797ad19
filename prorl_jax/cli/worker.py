"""`python -m prorl_jax.cli.worker --exchange=URL --engine=jax|vllm [--engine_options=JSON]`
(`prorl-worker`): one rollout
worker on an exchange (`rollout.worker.Worker`) until SIGTERM, `--max_requests` or
`--idle_exit_seconds`. Runs in vLLM's environment too: it imports no JAX and no config."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile

from absl import flags

from prorl_jax import sandbox
from prorl_jax.cli.flags import USAGE_EXIT, define_engine, parse
from prorl_jax.records import InvalidEntry
from prorl_jax.rewards.pool import DEFAULT_TIMEOUT_S, VerifierPool
from prorl_jax.rollout.engines import make_engine, specs
from prorl_jax.rollout.entries import safe_name
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.rollout.queue import LEASE_SECONDS
from prorl_jax.rollout.worker import INFLIGHT_NEEDS, Worker
from prorl_jax.sandbox import confinement

log = logging.getLogger("prorl_jax.worker")

FLAGS = flags.FlagValues()
_F = dict(flag_values=FLAGS)
flags.DEFINE_string("exchange", None, "file:///dir, gs://bucket/path or a dir", **_F)
flags.mark_flag_as_required("exchange", flag_values=FLAGS)
define_engine(FLAGS, "jax", "the generation engine", specs.worker_engines)
flags.DEFINE_string("cache_dir", "", "local copies of weights (default: a temporary one)", **_F)
flags.DEFINE_string("worker_id", "", "this worker's name (default: host-pid)", **_F)
flags.DEFINE_float("lease_seconds", LEASE_SECONDS, "how long a claim holds unrenewed", **_F)
flags.DEFINE_float("poll_seconds", 0.2, "the longest wait between looks at the queue", **_F)
flags.DEFINE_integer("max_requests", None, "stop after this many requests", **_F)
flags.DEFINE_float("idle_exit_seconds", None, "stop after this long without a request", **_F)
flags.DEFINE_integer("verifier_processes", 1, "verifier child processes", **_F)
flags.DEFINE_float(
  "verifier_timeout", DEFAULT_TIMEOUT_S, "hard wall-clock kill of one verification, s", **_F
)
flags.DEFINE_integer(
  "sandbox_memory_bytes",
  None,
  "memory ceiling of all this worker's code sandboxes together (default 4 GiB)",
  **_F,
)
flags.DEFINE_integer(
  "sandbox_pids",
  None,
  "process ceiling of all this worker's code sandboxes together (default 256)",
  **_F,
)
flags.DEFINE_bool(
  "unsandboxed_code", False, "run code rewards WITHOUT the bubblewrap sandbox (trusted data)", **_F
)
flags.DEFINE_string(
  "engine_options",
  "{}",
  "JSON object of the engine's options: jax (batching static|continuous, slots, page_size, "
  "pages, steps_per_sync, attention auto|xla|pallas) or vllm (gpu_memory_utilization, "
  "tensor_parallel_size, max_num_seqs, enable_prefix_caching, enforce_eager, ...)",
  **_F,
)
flags.DEFINE_alias("vllm_options", "engine_options", flag_values=FLAGS)
flags.DEFINE_bool(
  "inflight_updates",
  False,
  "load newer weights between decode chunks without dropping live sequences (the JAX engine's "
  "continuous batching); each token records its version",
  **_F,
)
flags.DEFINE_bool(
  "exit_with_parent", False, "stop when the process that started it dies (local workers)", **_F
)


def main(argv=None) -> int:
  """The worker's command line; returns 0 on a clean stop (2 with one line for a bad flag)."""
  if (
    parse(FLAGS, argv, prog="python -m prorl_jax.cli.worker", about=__doc__.split("\n\n")[0])
    is None
  ):
    return USAGE_EXIT
  F = FLAGS
  # force: absl (unparse_flags) logs through the root logger first, which installs a handler
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", force=True)
  wid = F.worker_id or f"{socket.gethostname()}-{os.getpid()}"
  try:
    safe_name(wid, "--worker_id")
    options = json.loads(F.engine_options)
    if not isinstance(options, dict):
      raise ValueError
  except InvalidEntry as e:
    print(f"error: {e}", file=sys.stderr)
    return USAGE_EXIT
  except ValueError:
    msg = f"error: --engine_options must be a JSON object, got {F.engine_options!r}"
    print(msg, file=sys.stderr)
    return USAGE_EXIT
  try:
    engine = make_engine(F.engine, options)
    if F.inflight_updates and not engine.inflight_updates:  # Worker checks too; here before
      raise ValueError(INFLIGHT_NEEDS)  # the verifier processes start
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return USAGE_EXIT
  own_cache = not F.cache_dir  # a fresh directory per process, removed on exit
  cache = F.cache_dir or tempfile.mkdtemp(prefix="prorl_worker_")
  confinement.allow_unsandboxed(F.unsandboxed_code)
  line = sandbox.describe()
  (log.warning if F.unsandboxed_code or "unavailable" in line else log.info)(
    "worker %s: %s", wid, line
  )
  pool = VerifierPool(
    F.verifier_processes,
    F.verifier_timeout,
    unsandboxed_code=F.unsandboxed_code,
    sandbox_memory_bytes=F.sandbox_memory_bytes,
    sandbox_pids=F.sandbox_pids,
  )
  worker = Worker(
    Exchange(F.exchange, F.lease_seconds),
    engine,
    cache,
    wid,
    F.poll_seconds,
    pool,
    inflight_updates=F.inflight_updates,
  )
  if F.exit_with_parent:
    worker.parent_pid = os.getppid()
  signal.signal(signal.SIGTERM, lambda *_: worker.stop.set())
  log.info(
    "worker %s: serving %s with the %s engine %s", wid, F.exchange, F.engine, json.dumps(options)
  )
  try:
    worker.run(F.max_requests, F.idle_exit_seconds)
  finally:
    pool.close()
    if own_cache:
      shutil.rmtree(cache, ignore_errors=True)
  log.info("worker %s: stopped after %d requests", wid, worker.done)
  return 0


if __name__ == "__main__":
  sys.exit(main())
