"""Two trainer processes on one global mesh (jax.distributed over gloo) train like one process."""

import json
import os
import socket

import numpy as np
import pytest
import safetensors.numpy

from tests.loop_helpers import finish, last_weights, metrics, start


def _free_port():
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _one_and_two_processes(one_dir, two_dir, base, common, single_only):
  """2 RL steps of one process with 2 CPU devices (`common` and `single_only` settings) and of
  two processes with one each (`common`), at once; returns the two processes' outputs."""
  single = start(
    one_dir,
    base,
    2,
    env_extra={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"},
    **common,
    **single_only,
  )
  coord = f"localhost:{_free_port()}"
  procs = [
    start(
      two_dir,
      base,
      2,
      **common,
      **{
        "dist.coordinator": coord,
        "dist.num_processes": 2,
        "dist.process_id": i,
        "dist.timeout_s": 120.0,
      },
    )
    for i in range(2)
  ]
  outs = [finish(p) for p in procs]
  finish(single)
  return outs


@pytest.mark.slow
def test_two_trainer_processes_equal_one(tmp_path, base):
  one_dir, two_dir = str(tmp_path / "one"), str(tmp_path / "two")
  common = {"checkpoint.every": 2, "rollout.mini_batch_prompts": 4}
  # One process with 2 devices: the same (1, 2, 1) mesh as two processes with one device each.
  outs = _one_and_two_processes(one_dir, two_dir, base, common, {})
  assert "process 1/2" not in outs[0] and "joined the process group as 1 of 2" in outs[1]

  v1, w1 = last_weights(one_dir)
  v2, w2 = last_weights(two_dir)
  assert v1 == v2 and sorted(w1) == sorted(w2)
  for k in w1:
    np.testing.assert_allclose(w2[k], w1[k], rtol=0, atol=2e-6, err_msg=k)
  start_w = safetensors.numpy.load_file(os.path.join(base, "model.safetensors"))
  assert any(not np.allclose(w1[k], start_w[k]) for k in w1)  # training moved the weights

  m1, m2 = metrics(one_dir), metrics(two_dir)
  assert [r["step"] for r in m1] == [r["step"] for r in m2]
  for a, b in zip(m1, m2):
    assert a.keys() == b.keys()
    for k in a:
      if isinstance(a[k], float):
        assert b[k] == pytest.approx(a[k], rel=1e-4, abs=1e-5), k
      else:
        assert a[k] == b[k], k
  s2 = json.load(open(os.path.join(two_dir, "summary.json")))
  assert s2["processes"] == 2 and s2["steps"] == 2
  # Only the primary writes: one metrics file, one set of checkpoints, both processes saved into it.
  assert os.path.isdir(os.path.join(two_dir, "checkpoints", "2"))


@pytest.mark.slow
def test_two_inline_trainer_processes_each_generate_and_equal_one(tmp_path, base):
  # rollout.engine=inline on two hosts: each process serves requests with a replica of the
  # version on its own devices while the primary waits; the run equals one process (2 devices)
  # whose rounds are split alike (one request per trainer process: external_workers=1 there).
  one_dir, two_dir = str(tmp_path / "one"), str(tmp_path / "two")
  common = {"rollout.engine": "inline", "rollout.mini_batch_prompts": 4, "eval.every": 2}
  outs = _one_and_two_processes(one_dir, two_dir, base, common, {"rollout.external_workers": 1})
  assert "worker inline-p0 served" in outs[0] and "worker inline-p1 served" in outs[1]
  assert not os.path.exists(os.path.join(two_dir, "exchange", "weights"))  # no files: replicas
  m1, m2 = metrics(one_dir), metrics(two_dir)
  assert [r["step"] for r in m1] == [r["step"] for r in m2]
  assert any("val/pass@1" in r for r in m2)  # validation generated inline too
  for a, b in zip(m1, m2):
    for k in a:
      if isinstance(a[k], float) and not k.startswith(("mismatch/", "workers/")):
        assert b[k] == pytest.approx(a[k], rel=1e-4, abs=1e-5), k
      elif k.startswith(("response/", "reward/")):
        assert a[k] == b[k], k
