"""The local layout: every GPU of a host trains and generates; the memory of each GPU split
between the trainer and one vLLM engine; idle GPUs and impossible layouts said in one line."""

import pytest

from prorl_jax import config as config_lib
from prorl_jax.rollout import layout
from prorl_jax.rollout.local import LocalWorkers
from prorl_jax.trainer import placement


def test_eight_gpus_one_engine_each():
  got = layout.plan(8, "vllm", "auto", tensor_parallel=1, vllm_memory=0.5)
  assert got.workers == tuple((g,) for g in range(8))
  assert (got.vllm_memory, got.trainer_memory, got.warnings) == (0.5, 0.45, ())
  assert [got.worker_env(i) for i in (0, 7)] == [
    {"CUDA_VISIBLE_DEVICES": "0"},
    {"CUDA_VISIBLE_DEVICES": "7"},
  ]
  assert got.describe() == (
    "layout: the trainer on GPUs 0-7 (JAX memory fraction 0.45); 8 vLLM worker(s) on 8 GPU(s) "
    "(gpu_memory_utilization 0.5): worker 0: GPU 0, worker 1: GPU 1, worker 2: GPU 2, "
    "worker 3: GPU 3, worker 4: GPU 4, worker 5: GPU 5, worker 6: GPU 6, worker 7: GPU 7"
  )


def test_eight_gpus_tensor_parallel_two():
  got = layout.plan(8, "vllm", "auto", tensor_parallel=2, vllm_memory=0.4)
  assert got.workers == ((0, 1), (2, 3), (4, 5), (6, 7))
  assert got.worker_env(3) == {"CUDA_VISIBLE_DEVICES": "6,7"}
  assert (got.vllm_memory, got.trainer_memory) == (0.4, 0.55)


def test_a_layout_that_leaves_gpus_idle_warns_and_one_that_cannot_fit_refuses():
  one = layout.plan(8, "vllm", 1)  # the old default: one GPU generating for eight
  assert one.workers == ((0,),) and one.warnings == (
    "7 of this host's 8 GPUs generate nothing (rollout.local_workers=1 x "
    "vllm.tensor_parallel=1); rollout.local_workers=auto uses 8 workers",
  )
  odd = layout.plan(6, "vllm", "auto", tensor_parallel=4)
  assert odd.workers == ((0, 1, 2, 3),) and "2 of this host's 6 GPUs" in odd.warnings[0]
  with pytest.raises(layout.LayoutError, match="needs 10 GPUs, this host has 8"):
    layout.plan(8, "vllm", 5, tensor_parallel=2)
  with pytest.raises(layout.LayoutError, match="needs 4 GPUs for one vLLM engine, this host has 2"):
    layout.plan(2, "vllm", "auto", tensor_parallel=4)
  with pytest.raises(layout.LayoutError, match="leaves the trainer 5% of each GPU"):
    layout.plan(8, "vllm", "auto", vllm_memory=0.9)
  with pytest.raises(layout.LayoutError, match=r"model.memory_fraction=0.6 \+ vllm"):
    layout.plan(8, "vllm", "auto", vllm_memory=0.5, trainer_memory=0.6)
  assert layout.plan(8, "vllm", "auto", vllm_memory=0.5, trainer_memory=0.4).trainer_memory == 0.4


def test_two_trainer_hosts_say_that_the_second_does_not_generate():
  got = layout.plan(8, "vllm", "auto", hosts=2)
  assert len(got.workers) == 8
  assert got.warnings == (
    "only the first of the 2 trainer hosts starts local workers: the GPUs of the others train "
    "and do not generate; start workers beside them (launch/slurm/train.sbatch WORKER_NODES, "
    "or rollout.external_workers)",
  )


def test_cpus_and_the_jax_engine_get_one_worker_without_pinning():
  for gpus, engine in ((0, "vllm"), (0, "jax"), (8, "jax")):
    got = layout.plan(gpus, engine, "auto")
    assert got.workers == ((),) and got.worker_env(0) == {} and got.trainer_memory is None
  assert layout.plan(0, "jax", 3).workers == ((), (), ())
  assert (
    layout.plan(8, "vllm", 0).workers == () and layout.plan(8, "vllm", 0).trainer_memory is None
  )


def test_the_config_resolves_through_the_layout():
  cfg = config_lib.base_config()
  assert cfg.rollout.local_workers == "auto"
  cfg.rollout.engine = "vllm"
  cfg.vllm.tensor_parallel = 2
  assert len(placement.layout(cfg, gpus=8).workers) == 4
  assert placement.layout(cfg, gpus=8).trainer_memory == 0.45
  cfg.rollout.local_workers = "two"
  with pytest.raises(config_lib.ConfigError, match="rollout.local_workers='two': want auto"):
    config_lib.validate(cfg)
  cfg.rollout.local_workers = "0"
  assert placement.layout(cfg, gpus=8).workers == ()


def test_local_workers_get_their_gpus(tmp_path):
  import stat

  py = tmp_path / "python"
  py.write_text('#!/bin/sh\necho "gpus=$CUDA_VISIBLE_DEVICES"\n')
  py.chmod(py.stat().st_mode | stat.S_IXUSR)
  got = layout.plan(4, "vllm", "auto", tensor_parallel=2)
  envs = [got.worker_env(i) for i in range(len(got.workers))]
  workers = LocalWorkers("file:///x", 2, "vllm", str(tmp_path / "logs"), python=str(py), envs=envs)
  for p in workers.procs:
    p.wait()
  logs = [open(workers._log(i)).read().strip() for i in range(2)]
  workers.stop()
  assert logs == ["gpus=0,1", "gpus=2,3"]


@pytest.mark.parametrize(
  "workers_asked, want", [("auto", ["gpus=0,1", "gpus=2,3"]), ("0", ["gpus="])]
)
def test_every_command_starts_its_local_workers_pinned_by_the_layout(
  tmp_path, monkeypatch, workers_asked, want
):
  """The trainer and both evaluation commands start their workers through one function: on 4
  GPUs with tensor parallel 2, two workers on GPUs 0,1 and 2,3 (not all of them on GPU 0); an
  evaluation with no local workers configured still gets one."""
  import stat

  from prorl_jax.trainer.placement import workers_plan
  from prorl_jax.trainer.workers import local_workers

  py = tmp_path / "python"
  py.write_text('#!/bin/sh\necho "gpus=$CUDA_VISIBLE_DEVICES"\n')
  py.chmod(py.stat().st_mode | stat.S_IXUSR)
  monkeypatch.setattr(layout, "visible_gpus", lambda: 4)
  cfg = config_lib.base_config()
  cfg.rollout.engine, cfg.rollout.worker_python = "vllm", str(py)
  cfg.rollout.local_workers, cfg.vllm.tensor_parallel = workers_asked, 2
  placed = workers_plan(cfg).layout
  workers = local_workers(
    workers_plan(cfg), "file:///x", str(tmp_path / "logs"), at_least_one=True, check=False
  )
  for p in workers.procs:
    p.wait()
  logs = [open(workers._log(i)).read().strip() for i in range(len(want))]
  workers.stop()
  assert logs == want and len(placed.workers) == (2 if workers_asked == "auto" else 0)


def test_the_fit_report_gives_the_trainer_what_the_run_gives_it():
  """One memory rule: the compile tool's HBM for the trainer is the fraction the run's layout
  gives it, moving with vllm.gpu_memory_utilization; a trainer-only node gets the whole GPU."""
  from configs import qwen15b
  from prorl_jax.parallel import chips
  from prorl_jax.trainer import fit
  from prorl_jax.trainer.plan import Plan

  chip = chips.parse("h200-8").chip
  for u in (0.3, 0.5, 0.7):
    cfg = qwen15b.get_config()
    cfg.vllm.gpu_memory_utilization = u
    share = layout.plan(8, "vllm", "auto", vllm_memory=u).trainer_memory
    assert share == round(1 - u - layout.HEADROOM, 3)
    assert fit.trainer_hbm(Plan.from_config(cfg), chip) == int(chip.hbm_bytes * share)
  cfg.rollout.local_workers = "0"  # external workers generate: this node only trains
  assert layout.plan(8, "vllm", 0, vllm_memory=0.7).trainer_memory is None
  assert fit.trainer_hbm(Plan.from_config(cfg), chip) == chip.hbm_bytes
  cfg.rollout.local_workers = "auto"
  cfg.model.memory_fraction = 0.2
  assert fit.trainer_hbm(Plan.from_config(cfg), chip) == int(chip.hbm_bytes * 0.2)
  tpu = chips.parse("v5p-8").chip
  assert fit.trainer_hbm(Plan.from_config(qwen15b.get_config()), tpu) == tpu.hbm_bytes
