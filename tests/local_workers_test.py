"""Local rollout workers: the worker interpreter is checked before any work, and a crash loop
stops the run in one line with the tail of the worker's log."""

import json
import os
import stat
import sys
import time

import pytest

from prorl_jax.rollout import local
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.rollout.local import LocalWorkers, WorkerFailure
from tests.exchange_test import _req


def _fake_python(tmp_path, body: str) -> str:
  path = tmp_path / "python"
  path.write_text("#!/bin/sh\n" + body + "\n")
  path.chmod(path.stat().st_mode | stat.S_IXUSR)
  return str(path)


def test_a_worker_python_without_vllm_is_one_line_naming_the_fix(tmp_path):
  with pytest.raises(
    WorkerFailure,
    match=r"need vllm, but .* cannot import it "
    r"\(ModuleNotFoundError: No module named 'vllm'\); build .*make venv-vllm",
  ):
    local.check_worker_python(sys.executable, "vllm")  # the test environment has no vLLM
  with pytest.raises(WorkerFailure, match="is not an executable Python"):
    local.check_worker_python(str(tmp_path / "nope" / "python"), "vllm")
  local.check_worker_python(sys.executable, "jax")  # this one has jax: no error


def test_the_worker_python_defaults_by_engine():
  assert local.worker_python("jax") == sys.executable
  assert local.worker_python("vllm").endswith("/.venv-vllm/bin/python")
  assert local.worker_python("vllm", "/opt/vllm/bin/python") == "/opt/vllm/bin/python"


def test_a_crash_looping_worker_stops_the_run_with_its_log(tmp_path):
  py = _fake_python(
    tmp_path, 'echo "starting"; echo "ImportError: libcuda.so.1 not found" >&2; exit 3'
  )
  workers = LocalWorkers("file:///nowhere", 1, "vllm", str(tmp_path / "logs"), python=py)
  t0 = time.time()
  try:
    with pytest.raises(WorkerFailure) as err:
      while time.time() - t0 < 30:
        workers.check()
        time.sleep(0.05)
    msg = str(err.value)
    assert "local worker 0 exited 3 times in a row" in msg and "last exit status 3" in msg
    assert "libcuda.so.1 not found" in msg and "\n" not in msg
    assert time.time() - t0 < 10 and workers.restarts == 2
  finally:
    workers.stop()


def test_a_worker_that_served_before_dying_is_restarted_not_stopped(tmp_path):
  py = _fake_python(tmp_path, 'echo "worker local0 served r1: 1 prompts x 2"; exit 1')
  workers = LocalWorkers("file:///nowhere", 1, "jax", str(tmp_path / "logs"), python=py)
  try:
    for _ in range(5):  # dies every time, but each life did work: never a crash loop
      workers.procs[0].wait()
      workers.check()
    assert workers.restarts == 5 and workers.failures == [0]
    workers.procs[0].wait()
    log = open(os.path.join(tmp_path, "logs", "worker0.log")).read()
    assert log.count("served") == 6
  finally:
    workers.stop()


def test_a_dead_workers_leases_are_expired_before_its_restart(tmp_path):
  """The trainer's waits do not sit out the lease of a worker it saw die: its requests are
  claimable at once, with the next attempt number; another worker's lease is untouched."""
  url = f"file://{tmp_path}/ex"
  ex = Exchange(url, lease_seconds=600)
  for i in range(3):
    _req(ex, i)
  mine = [ex.queue.claim("local0"), ex.queue.claim("local0")]
  theirs = ex.queue.claim("local1")
  py = _fake_python(tmp_path, 'echo "worker local0 served r9: 1 prompts x 2"; exit 1')
  workers = LocalWorkers(
    url, 1, "jax", str(tmp_path / "logs"), python=py, on_death=ex.queue.release
  )
  try:
    workers.procs[0].wait()
    assert ex.queue.claim("other") is None  # all three held, for 600 s
    workers.check()
    assert workers.restarts == 1
    again = [ex.queue.claim("new"), ex.queue.claim("new"), ex.queue.claim("new")]
    assert sorted(c.request_id for c in again[:2]) == sorted(c.request_id for c in mine)
    assert [c.attempt for c in again[:2]] == [1, 1] and again[2] is None
    assert ex.queue.heartbeat(theirs) and not ex.queue.heartbeat(mine[0])
    assert ex.stats["released"] == 2 and ex.queue.release("local0") == 0
  finally:
    workers.stop()


def test_the_trainer_refuses_a_vllm_worker_python_before_loading_anything(tmp_path):
  import subprocess

  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  t0 = time.time()
  res = subprocess.run(
    [
      sys.executable,
      "-m",
      "prorl_jax.main",
      "--config=configs/tiny.py",
      "--config.rollout.engine=vllm",
      f"--config.rollout.worker_python={sys.executable}",
      f"--config.run_dir={tmp_path}/run",
    ],
    cwd=root,
    capture_output=True,
    text=True,
    timeout=300,
    env=dict(os.environ, PYTHONPATH=root, PRORL_CACHE_DIR=str(tmp_path / "cache")),
  )
  assert res.returncode == 2
  err = [line for line in res.stderr.splitlines() if line.startswith("error:")]
  assert len(err) == 1 and "cannot import it" in err[0] and "make venv-vllm" in err[0], res.stderr
  assert "Traceback" not in res.stderr
  assert not os.path.exists(tmp_path / "cache")  # the demo's base model was never built
  assert time.time() - t0 < 120


@pytest.mark.parametrize("engine", ["vllm", "jax"])
def test_workers_get_the_configs_engine_options(tmp_path, engine):
  from prorl_jax import config as config_lib
  from prorl_jax.trainer import placement

  cfg = config_lib.base_config()
  cfg.rollout.engine = engine
  cfg.vllm.tensor_parallel = 2
  cfg.vllm.enforce_eager = "false"
  cfg.vllm.lora = "adapter"
  cfg.jax_engine.batching = "continuous"
  cfg.jax_engine.slots = 24
  py = _fake_python(tmp_path, 'echo "ARGS: $*"; sleep 30')
  workers = LocalWorkers(
    "file:///x",
    1,
    engine,
    str(tmp_path / "logs"),
    python=py,
    engine_options=placement.engine_options(cfg),
    inflight_updates=engine == "jax",
    verifier_processes=cfg.rollout.verifier_processes + 2,
  )
  try:
    log = os.path.join(tmp_path, "logs", "worker0.log")
    t0 = time.time()
    while "ARGS" not in open(log).read() and time.time() - t0 < 10:
      time.sleep(0.05)
    args = open(log).read()
    assert f"--engine={engine}" in args
    assert ("--inflight_updates" in args) == (engine == "jax")
    assert "--verifier_processes=3" in args
    opts = json.loads(args.split("--engine_options=", 1)[1].split(" --")[0].strip())
    assert (
      opts
      == {
        "vllm": {
          "gpu_memory_utilization": 0.5,
          "tensor_parallel_size": 2,
          "max_num_seqs": 256,
          "enable_prefix_caching": True,
          "enforce_eager": "false",
          "lora": "adapter",
        },
        "jax": {
          "batching": "continuous",
          "slots": 24,
          "page_size": 16,
          "pages": 0,
          "steps_per_sync": 16,
          "attention": "auto",
          "dtype": "float32",
        },
      }[engine]
    )
  finally:
    workers.stop()
