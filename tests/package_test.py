"""The installable package: console scripts resolve, and work from any directory."""

import importlib
import os
import subprocess
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]["scripts"]


def test_every_console_script_names_a_callable():
  assert {
    "prorl-train",
    "prorl-eval",
    "prorl-worker",
    "prorl-plot",
    "prorl-prepare",
    "prorl-export",
  } <= set(SCRIPTS)
  for target in SCRIPTS.values():
    module, attr = target.split(":")
    assert callable(getattr(importlib.import_module(module), attr)), target


def test_installed_scripts_run_outside_the_repository(tmp_path):
  """`make` installs the project (editable) into the venv: its scripts need no PYTHONPATH."""
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  bindir = os.path.dirname(sys.executable)
  for name in ("prorl-prepare", "prorl-export", "prorl-worker"):
    res = subprocess.run(
      [os.path.join(bindir, name), "--help"],
      cwd=tmp_path,
      env=env,
      capture_output=True,
      text=True,
      timeout=120,
    )
    assert res.returncode == 0 and "usage:" in res.stdout, (name, res.stderr[-500:])
  res = subprocess.run(
    [sys.executable, "-c", "from prorl_jax.model import load_hf"],
    cwd=tmp_path,
    env=env,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert res.returncode == 0, res.stderr[-500:]
