"""pass@k and the evaluation CLI."""

import json
import os
import subprocess
import sys

from prorl_jax.demo import tiny_base
from prorl_jax.trainer.scoring import pass_at_k

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_pass_at_k_by_hand():
  # n=4, c=1, k=2: 1 − C(3,2)/C(4,2) = 1 − 3/6 = 0.5
  assert pass_at_k(4, 1, 2) == 0.5
  # n=5, c=2, k=1: 1 − C(3,1)/C(5,1) = 0.4 (= c/n)
  assert abs(pass_at_k(5, 2, 1) - 0.4) < 1e-12
  assert pass_at_k(5, 0, 3) == 0.0 and pass_at_k(5, 3, 3) == 1.0


def test_eval_cli_on_a_hf_directory(tmp_path):
  base = tiny_base.build(str(tmp_path / "base"))
  out = tmp_path / "eval.json"
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", XLA_FLAGS="")
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "prorl_jax.cli.eval",
      "--config=configs/tiny.py",
      f"--checkpoint={base}",
      f"--out={out}",
      "--config.eval.heldout=40",
      "--config.eval.samples=4",
      "--config.eval.pass_k=1,4",
    ],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  res = json.loads(out.read_text())
  assert 0.0 <= res["pass@1"] <= res["pass@4"] <= 1.0
  assert res["verifier_failures"] == 0 and "chain_sum/pass@1" in res
