"""The RL loop end to end: exact resume after kill -9, worker restarts, resets, learning."""

import json
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

from prorl_jax.trainer.collect import admissible
from tests.loop_helpers import finish, metrics, params_hash, start


def _wait_for_checkpoint(run_dir, step, proc, timeout=300):
  t0 = time.time()
  path = os.path.join(run_dir, "checkpoints", str(step))
  while not os.path.isdir(path):
    assert proc.poll() is None, proc.stdout.read()[-3000:]
    assert time.time() - t0 < timeout, f"no checkpoint {step} after {timeout}s"
    time.sleep(0.05)


def _wait_for_no_process_naming(text, timeout=120):
  t0 = time.time()
  while subprocess.run(["pgrep", "-f", text], capture_output=True).returncode == 0:
    assert time.time() - t0 < timeout, f"a process naming {text} still runs after {timeout}s"
    time.sleep(0.05)


def _kill9(proc):
  os.kill(proc.pid, signal.SIGKILL)
  proc.wait(timeout=30)


PIPELINE = {"rollout.pipeline": True, "rollout.max_staleness": 1}


def _host_state(run_dir, step):
  """The loop state (JSON) a checkpoint holds beside the TrainState."""
  with open(os.path.join(run_dir, "checkpoints", str(step), "host", "metadata")) as f:
    return json.load(f)


def _kill_during_a_save(run_dir, proc, timeout=300):
  """kill -9 while a checkpoint's step directory is still being written."""
  ckpts = os.path.join(run_dir, "checkpoints")
  t0 = time.time()
  while True:
    names = os.listdir(ckpts) if os.path.isdir(ckpts) else []
    if any("tmp" in n for n in names) and any(n.isdigit() for n in names):
      break
    assert proc.poll() is None and time.time() - t0 < timeout
  _kill9(proc)


@pytest.mark.slow
@pytest.mark.parametrize(
  "extra", [{}, PIPELINE, {"lora.rank": 8}], ids=["serial", "pipelined", "lora"]
)
def test_exact_resume_after_kill9(tmp_path, base, extra):
  """kill -9 right after a checkpoint (with the pipeline: the next step's rollouts in flight,
  and once more after the next step published its weights, before its checkpoint) and,
  serially, kill -9 during a save: each resumed run ends as the uninterrupted one did. At
  the cut the carry-over buffer holds groups, the length penalty is inside a cycle and (with the
  pipeline) the prefetch is in flight: 16 samples a prompt make a quarter to a third of the
  groups informative, so refill rounds overshoot the batch and leave groups over."""
  pipelined, extra = bool(extra.get("rollout.pipeline")), dict(extra, **{"rollout.n": 16})
  ref_dir = str(tmp_path / "ref")
  finish(start(ref_dir, base, 6, **extra))
  cuts = {str(tmp_path / "cut"): "resumed from checkpoint step 3"}
  proc = start(str(tmp_path / "cut"), base, 6, **extra)
  _wait_for_checkpoint(str(tmp_path / "cut"), 3, proc)
  _kill9(proc)
  host = _host_state(str(tmp_path / "cut"), 3)
  assert host["length_penalty"] == {"phase": "off", "steps_in_phase": 1, "cycles": 0}, host
  assert len(host["buffer"]) >= 1, host  # groups carried over into step 4
  if pipelined:  # the next step's requests were in flight at the cut, and are redone on resume
    assert host["prefetch"]["step"] == 4 and len(host["prefetch"]["requests"]) >= 1, host
  if pipelined:  # killed after step 4 published its weights, before its checkpoint finished:
    # the loop has gone on past that save (its async write is what the kill cuts short)
    late = str(tmp_path / "late")
    cuts[late] = "resumed from checkpoint step 3"
    proc = start(late, base, 6, **extra)
    _wait_for_checkpoint(late, 4, proc)
    _kill9(proc)
    for name in os.listdir(os.path.join(late, "checkpoints")):  # the save that never finished
      if not name.isdigit() or int(name) >= 4:
        shutil.rmtree(os.path.join(late, "checkpoints", name))
  if not pipelined:  # the same run killed while a step directory is half written
    cuts[str(tmp_path / "in_save")] = "resumed from checkpoint step"
    _kill_during_a_save(
      str(tmp_path / "in_save"), start(str(tmp_path / "in_save"), base, 6, **extra)
    )
  for cut_dir in cuts:  # the killed trainers' workers notice their parent is gone and exit
    _wait_for_no_process_naming(cut_dir)
  for cut_dir, resumed in cuts.items():
    out = finish(start(cut_dir, base, 6, **extra))
    assert resumed in out
    assert metrics(cut_dir) == metrics(ref_dir)
    assert params_hash(cut_dir) == params_hash(ref_dir)
    assert json.load(open(os.path.join(cut_dir, "summary.json")))["steps"] == 6
  if pipelined:  # steps after the first also train on rollouts one version behind
    rows = [r for r in metrics(ref_dir) if "sampling/rounds" in r]
    assert rows[0]["pipeline/prefetched_kept"] == 0  # nothing to prefetch before step 1
    assert sum(r["pipeline/prefetched_kept"] for r in rows[1:]) > 0
    assert sum(r.get("staleness/1", 0) for r in rows) > 0
    raw = [json.loads(x) for x in open(os.path.join(ref_dir, "metrics.jsonl"))]
    timed = [r for r in raw if "time/wait_rollouts_s" in r]
    assert all(r["time/workers_wait_weights_s"] >= 0 for r in timed) and len(timed) == 6


def _rows(run_dir):
  path = os.path.join(run_dir, "metrics.jsonl")
  return [json.loads(x) for x in open(path)] if os.path.exists(path) else []


def _signal_when(proc, run_dir, ready, sig, timeout=300):
  """Sends `sig` to the trainer as soon as its metrics satisfy `ready`; its exit status."""
  t0 = time.time()
  while not ready(_rows(run_dir)):
    assert proc.poll() is None, proc.stdout.read()[-3000:]
    assert time.time() - t0 < timeout
    time.sleep(0.02)
  os.kill(proc.pid, sig)
  t1 = time.time()
  out = proc.communicate(timeout=120)[0]
  return proc.returncode, time.time() - t1, out


@pytest.mark.slow
def test_sigterm_saves_within_the_grace_period_and_the_resumed_run_equals_the_uninterrupted_one(
  tmp_path, base
):
  """SIGTERM while step 2 collects its rollouts (the step is abandoned: the state before it is
  saved), and SIGTERM as step 2's validation starts (the trained step is saved with its
  validation still to do); checkpoints are otherwise only written at the end. Each stops with
  exit 75 and a new checkpoint within the grace period, and its resumed run ends as the
  uninterrupted one did, metrics (validations included) and weights."""
  extra = {"eval.every": 2, "eval.heldout": 64, "checkpoint.every": 100, "checkpoint.grace_s": 60}
  ref_dir = str(tmp_path / "ref")
  finish(start(ref_dir, base, 4, **extra))
  assert [r["step"] for r in _rows(ref_dir) if r.get("event") == "validation"] == [0, 2, 4]
  cuts = {
    "collecting": lambda rows: any(r["step"] == 1 and "sampling/rounds" in r for r in rows),
    "validating": lambda rows: any(r["step"] == 2 and "sampling/rounds" in r for r in rows),
  }
  for name, ready in cuts.items():
    run_dir = str(tmp_path / name)
    code, secs, out = _signal_when(start(run_dir, base, 4, **extra), run_dir, ready, signal.SIGTERM)
    assert code == 75, out[-3000:]
    stopped = json.load(open(os.path.join(run_dir, "stopped.json")))
    assert stopped["why"] == "SIGTERM" and stopped["stop_s"] < 60 and secs < 60, stopped
    saved = sorted(int(n) for n in os.listdir(os.path.join(run_dir, "checkpoints")) if n.isdigit())
    if name == "collecting":  # abandoned in step 2: the state after step 1, saved on the signal
      assert (stopped["stopped_at"], stopped["pending_tail"], saved) == (1, False, [1]), stopped
    else:  # step 2 trained, its validation abandoned: done first by the resumed run
      assert (stopped["stopped_at"], stopped["pending_tail"], saved) == (2, True, [2]), stopped
    out = finish(start(run_dir, base, 4, **extra))
    assert f"resumed from checkpoint step {stopped['stopped_at']}" in out
    assert metrics(run_dir) == metrics(ref_dir), name
    assert params_hash(run_dir) == params_hash(ref_dir), name
    assert not os.path.exists(os.path.join(run_dir, "stopped.json"))
  _the_end_of_a_run_is_resumable(tmp_path, base, ref_dir, extra)


def _summary(run_dir):
  s = json.load(open(os.path.join(run_dir, "summary.json")))
  return {k: v for k, v in s.items() if not k.startswith("wall_seconds")}


def _the_end_of_a_run_is_resumable(tmp_path, base, ref_dir, extra):
  """Stops after the last checkpoint: during the final validation or before the summary (the
  checkpoint at total_steps is there, the run is not finished: its resumption writes the final
  row and the summary), and a SIGTERM once the loop is over (the run still ends, never killed
  by the signal's default action)."""
  final = [r for r in _rows(ref_dir) if r.get("event") == "final"]
  assert len(final) == 1 and final[0]["step"] == 4
  for name in ("before_the_summary", "during_the_final_validation"):
    run_dir = str(tmp_path / name)
    shutil.copytree(ref_dir, run_dir)
    os.remove(os.path.join(run_dir, "summary.json"))
    if name == "during_the_final_validation":
      with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [x for x in f if json.loads(x).get("event") != "final"]
      with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
        f.writelines(rows)
    out = finish(start(run_dir, base, 4, **extra))
    assert "resumed from checkpoint step 4" in out and "is finished" not in out, out[-2000:]
    assert metrics(run_dir) == metrics(ref_dir), name
    assert _summary(run_dir) == _summary(ref_dir), name
    again = finish(start(run_dir, base, 4, **extra))  # now finished: nothing more is done
    assert "is finished: step 4 of total_steps=4" in again
  run_dir = str(tmp_path / "late_sigterm")
  ready = lambda rows: any(r.get("event") == "final" for r in rows)  # noqa: E731
  code, _, out = _signal_when(start(run_dir, base, 4, **extra), run_dir, ready, signal.SIGTERM)
  assert code in (0, 75), (code, out[-3000:])
  if code == 75:
    finish(start(run_dir, base, 4, **extra))
  assert metrics(run_dir) == metrics(ref_dir)
  assert _summary(run_dir) == _summary(ref_dir)


@pytest.mark.slow
def test_killed_worker_is_restarted_and_reset_zeroes_kl(tmp_path, base):
  run_dir = str(tmp_path / "run")
  proc = start(run_dir, base, 6, **{"algo.ref_reset_every": 3, "algo.kl_coef": 0.01})
  _wait_for_checkpoint(run_dir, 2, proc)
  pids = subprocess.run(
    ["pgrep", "-f", f"worker_id=local0.*{run_dir}|{run_dir}.*worker_id=local0"],
    capture_output=True,
    text=True,
  ).stdout.split()
  assert pids, "no local worker found"
  for pid in pids:
    os.kill(int(pid), signal.SIGKILL)
  finish(proc)
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


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["jax", "inline"])
def test_demo_smoke_raises_training_reward(tmp_path, base, engine):
  """A shortened demo (every component on, a higher learning rate): training reward must rise,
  with a JAX worker and with the trainer generating itself. Seeded end to end, so the numbers
  are the same on every run of this machine."""
  run_dir = str(tmp_path / "smoke")
  out = finish(
    start(
      run_dir,
      base,
      24,
      **{
        "rollout.engine": engine,
        "rollout.prompts_per_step": 16,
        "rollout.n": 8,
        "rollout.max_response_len": 40,  # the demo's: at 24 many answers are cut short
        "optim.lr": 3e-4,
        "checkpoint.every": 0,
        "eval.every": 12,  # in-loop validation at the start, at step 12 and at the end
        "eval.heldout": 64,
        "eval.samples": 2,
        "eval.pass_k": "1,2",
      },
    )
  )
  vals = [r for r in metrics(run_dir) if r.get("event") in ("validation", "final")]
  assert [r["step"] for r in vals] == [0, 12, 24, 24]
  assert all(0 <= r["val/pass@1"] <= r["val/pass@2"] <= 1 for r in vals)
  printed = [ln for ln in out.splitlines() if ln.startswith("validation at step")]
  assert [ln.split(":")[0] for ln in printed] == [
    "validation at step 0",
    "validation at step 12",
    "validation at step 24",
  ]
  assert f"pass@1 {vals[1]['val/pass@1']:.4f}" in printed[1]
  summary = json.load(open(os.path.join(run_dir, "summary.json")))
  assert summary["pass@1_start"] == vals[0]["val/pass@1"]
  assert summary["pass@1_end"] == vals[-1]["val/pass@1"]
  rows = [r for r in metrics(run_dir) if "reward/raw_mean" in r]
  first = np.mean([r["reward/raw_mean"] for r in rows[:8]])
  last = np.mean([r["reward/raw_mean"] for r in rows[-8:]])
  assert last > first + 0.02, (first, last)


@pytest.mark.slow
def test_the_run_learns_the_same_with_continuous_batching(tmp_path, base):
  # Both JAX batchings return the same rows for the same request (same tokens; log-probs to
  # float rounding), so three RL steps see the same samples and rewards and reach the same
  # updates to float rounding: the continuous engine learns as the static one does.
  runs = {}
  for batching in ("static", "continuous"):
    run_dir = str(tmp_path / batching)
    extra = {"jax_engine.batching": batching, "jax_engine.slots": 6, "jax_engine.page_size": 8}
    finish(start(run_dir, base, 3, **extra))
    runs[batching] = metrics(run_dir)
  a, b = runs["static"], runs["continuous"]
  assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 2, 3]
  for ra, rb in zip(a, b):
    for k in ("response/tokens", "response/length_mean", "reward/raw_mean", "reward/pass_rate"):
      assert ra[k] == rb[k], (k, ra[k], rb[k])  # the same samples and rewards
    for k, v in ra.items():
      if isinstance(v, float) and abs(v) > 1e-4 and not k.startswith("mismatch/"):
        assert rb[k] == pytest.approx(v, rel=1e-3, abs=1e-5), k
  assert all(0 < r["reward/pass_rate"] < 1 for r in a)  # rewards that vary, not all 0 or 1


@pytest.mark.slow
def test_an_inline_run_is_the_run_with_a_worker(tmp_path, base):
  # The trainer generating itself (rollout.engine=inline, its params rounded as the published
  # files are) returns the rows a JAX worker returns for the same requests: three RL steps
  # log the same metrics, bit for bit; and with no worker process no weight file is written.
  # A reference reset after the last step, then the final validation: the engine still holds
  # the trainer's params, which the reset must leave valid.
  runs = {}
  for engine in ("jax", "inline"):
    run_dir = str(tmp_path / engine)
    extra = {"algo.ref_reset_every": 3, "algo.kl_coef": 0.01, "eval.every": 2, "eval.heldout": 16}
    out = finish(start(run_dir, base, 3, **{"rollout.engine": engine}, **extra))
    runs[engine] = metrics(run_dir)
  assert "worker inline served" in out
  assert not os.path.exists(os.path.join(tmp_path, "inline", "exchange", "weights"))
  a, b = runs["jax"], runs["inline"]
  assert sorted({r["step"] for r in a}) == sorted({r["step"] for r in b}) == [0, 1, 2, 3]
  assert sum("val/pass@1" in r for r in b) == 3  # steps 0 and 2, and the final one
  probe = ("mismatch/probe_max", "mismatch/probe_mean", "workers/restarts")  # workers only
  assert len(a) == len(b)
  for ra, rb in zip(a, b):
    assert {k: v for k, v in ra.items() if k not in probe} == rb
  assert all(0 < r["reward/pass_rate"] < 1 for r in a if "reward/pass_rate" in r)  # they vary
