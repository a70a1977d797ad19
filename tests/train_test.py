"""The RL loop end to end: exact resume after kill -9, worker restarts, resets, learning."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from prorl_jax import demo_task
from prorl_jax.train import admissible

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOLATILE = ("time/", "perf/", "exchange/", "workers/")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
  return demo_task.build(str(tmp_path_factory.mktemp("base") / "base"), steps=60)


def _flags(run_dir, base, steps, **extra):
  f = {"run_dir": run_dir, "model.path": base, "total_steps": steps, "rollout.n": 4,
       "rollout.prompts_per_step": 8, "rollout.mini_batch_prompts": 4,
       "rollout.micro_batch_size": 8, "rollout.max_response_len": 24, "checkpoint.every": 1,
       "checkpoint.keep": 10, "eval.every": 0, "rollout.timeout_s": 300.0,
       "algo.length_penalty_on_steps": 2, "algo.length_penalty_off_steps": 2}
  f.update(extra)
  return [f"--config.{k}={v}" for k, v in f.items()]


def _start(run_dir, base, steps, **extra):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", XLA_FLAGS="")
  return subprocess.Popen([sys.executable, "-m", "prorl_jax.main", "--config=configs/tiny.py",
                           *_flags(run_dir, base, steps, **extra)], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc, timeout=600):
  out = proc.communicate(timeout=timeout)[0]
  assert proc.returncode == 0, out[-3000:]
  return out


def _metrics(run_dir):
  rows = [json.loads(x) for x in open(os.path.join(run_dir, "metrics.jsonl"))]
  return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


def _params_hash(run_dir):
  exchange = os.path.join(run_dir, "exchange", "weights")
  last = sorted(os.listdir(exchange))[-1]
  with open(os.path.join(exchange, last, "model.safetensors"), "rb") as f:
    return last, hashlib.sha256(f.read()).hexdigest()


def _wait_for_checkpoint(run_dir, step, proc, timeout=300):
  t0 = time.time()
  path = os.path.join(run_dir, "checkpoints", str(step))
  while not os.path.isdir(path):
    assert proc.poll() is None, proc.stdout.read()[-3000:]
    assert time.time() - t0 < timeout, f"no checkpoint {step} after {timeout}s"
    time.sleep(0.05)


def _kill9(proc):
  os.kill(proc.pid, signal.SIGKILL)
  proc.wait(timeout=30)


def test_exact_resume_after_kill9(tmp_path, base):
  ref_dir, cut_dir = str(tmp_path / "ref"), str(tmp_path / "cut")
  _finish(_start(ref_dir, base, 6))
  proc = _start(cut_dir, base, 6)
  _wait_for_checkpoint(cut_dir, 3, proc)
  _kill9(proc)  # right after step 3's checkpoint
  time.sleep(1.0)
  out = _finish(_start(cut_dir, base, 6))
  assert "resumed from checkpoint step 3" in out
  assert _metrics(cut_dir) == _metrics(ref_dir)
  assert _params_hash(cut_dir) == _params_hash(ref_dir)
  summary = json.load(open(os.path.join(cut_dir, "summary.json")))
  assert summary["steps"] == 6


def test_exact_resume_after_kill9_during_a_save(tmp_path, base):
  ref_dir, cut_dir = str(tmp_path / "ref"), str(tmp_path / "cut")
  _finish(_start(ref_dir, base, 5))
  proc = _start(cut_dir, base, 5)
  tmp_marker = os.path.join(cut_dir, "checkpoints")
  t0 = time.time()
  while True:  # kill while a step directory is still being written
    names = os.listdir(tmp_marker) if os.path.isdir(tmp_marker) else []
    if any("tmp" in n for n in names) and any(n.isdigit() for n in names):
      break
    assert proc.poll() is None and time.time() - t0 < 300
  _kill9(proc)
  _finish(_start(cut_dir, base, 5))
  assert _metrics(cut_dir) == _metrics(ref_dir)
  assert _params_hash(cut_dir) == _params_hash(ref_dir)


def test_killed_worker_is_restarted_and_reset_zeroes_kl(tmp_path, base):
  run_dir = str(tmp_path / "run")
  proc = _start(run_dir, base, 6, **{"algo.ref_reset_every": 3, "algo.kl_coef": 0.01})
  _wait_for_checkpoint(run_dir, 2, proc)
  pids = subprocess.run(["pgrep", "-f", f"worker_id=local0.*{run_dir}|{run_dir}.*worker_id=local0"],
                        capture_output=True, text=True).stdout.split()
  assert pids, "no local worker found"
  for pid in pids:
    os.kill(int(pid), signal.SIGKILL)
  _finish(proc)
  rows = [json.loads(x) for x in open(os.path.join(run_dir, "metrics.jsonl"))]
  steps = {r["step"]: r for r in rows if "event" not in r or r["event"].startswith("length")}
  assert max(r.get("workers/restarts", 0) for r in rows) >= 1
  resets = [r for r in rows if r.get("event", "").startswith("reference_reset")]
  assert [r["step"] for r in resets] == [3, 6]
  assert steps[4]["actor/kl_ref_old"] == 0.0  # old and ref log-probs identical after the reset
  assert steps[3]["actor/kl_ref_old"] > 0.0


def test_staleness_admission():
  assert admissible(5, 5, 0) and not admissible(5, 4, 0)
  assert admissible(5, 3, 2) and not admissible(5, 2, 2)
  assert not admissible(5, 6, 3)  # from the future: an interrupted run's version


def test_demo_smoke_raises_training_reward(tmp_path, base):
  """A shortened demo (every component on, a higher learning rate): training reward must rise.
  Seeded end to end, so the numbers are the same on every run of this machine."""
  run_dir = str(tmp_path / "smoke")
  _finish(_start(run_dir, base, 24, **{"rollout.prompts_per_step": 16, "rollout.n": 8,
                                       "rollout.micro_batch_size": 32, "optim.lr": 3e-4,
                                       "checkpoint.every": 0}))
  rows = [r for r in _metrics(run_dir) if "reward/raw_mean" in r]
  first = np.mean([r["reward/raw_mean"] for r in rows[:8]])
  last = np.mean([r["reward/raw_mean"] for r in rows[-8:]])
  assert last > first + 0.02, (first, last)
