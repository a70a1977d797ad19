"""Every failure a user can cause at a command line ends in one line that names what to fix,
with exit status 2 and no traceback; --debug shows the traceback."""

import json
import os
import subprocess
import sys

import pytest

from prorl_jax.demo import tiny_base

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
  return tiny_base.build(str(tmp_path_factory.mktemp("base") / "m"))


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
  p = tmp_path_factory.mktemp("data") / "train.jsonl"
  p.write_text(
    json.dumps(
      {
        "data_source": "chain_sum",
        "prompt": [{"role": "user", "content": "1+2"}],
        "reward_model": {"ground_truth": "3"},
      }
    )
    + "\n"
  )
  return str(p)


def _run(module, args, env_extra=None):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", XLA_FLAGS="")
  env.pop("PRORL_DEBUG", None)
  env.update(env_extra or {})
  return subprocess.run(
    [sys.executable, "-m", module] + args,
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )


def _model_args(base, rows, tmp_path):
  return [
    "--config=configs/tiny.py",
    "--config.model.build_tiny=False",
    f"--config.model.path={base}",
    f"--config.data.train_files={rows}",
    f"--config.run_dir={tmp_path / 'run'}",
    "--config.eval.every=0",
  ]


CASES = [
  (
    "typo'd key",
    "prorl_jax.main",
    ["--config=configs/tiny.py", "--config.algo.clip_hgh=0.3"],
    "did you mean --config.algo.clip_high?",
  ),
  (
    "missing config file",
    "prorl_jax.main",
    ["--config=configs/nope.py"],
    "--config=configs/nope.py: no such file; the configs here are: configs/qwen15b.py",
  ),
  (
    "unknown variant",
    "prorl_jax.main",
    ["--config=configs/tiny.py:huge"],
    "unknown variant 'huge' of configs/tiny.py",
  ),
  (
    "value of the wrong type",
    "prorl_jax.main",
    ["--config=configs/tiny.py", "--config.algo.clip_low=abc"],
    "--config.algo.clip_low=abc: abc is not a number",
  ),
  (
    "value out of range",
    "prorl_jax.main",
    ["--config=configs/tiny.py", "--config.algo.clip_low=1.5"],
    "algo.clip_low must be in",
  ),
  (
    "a section set as a value",
    "prorl_jax.main",
    ["--config=configs/tiny.py", "--config.algo=3"],
    "--config.algo is a section",
  ),
  (
    "missing data file",
    "prorl_jax.main",
    ["--config=configs/tiny.py", "--config.data.train_files=/nope/train.jsonl"],
    "data.train_files: /nope/train.jsonl: no such file",
  ),
  (
    "weights that do not match the files",
    "prorl_jax.main",
    [
      "--config=configs/tiny.py",
      "--config.data.train_files=configs/tiny.py",
      "--config.data.weights=1,2",
    ],
    "data.weights has 2 values for 1 training files",
  ),
  (
    "missing prepared mix",
    "prorl_jax.main",
    ["--config=configs/tiny.py", "--config.data.prepared=/nope/mix"],
    "data.prepared='/nope/mix': no readable manifest.json",
  ),
  (
    "model directory without config.json",
    "prorl_jax.main",
    [
      "--config=configs/qwen15b.py",
      "--config.model.path=/tmp",
      "--config.data.prepared=",
      "--config.data.val_suite=",
      "--config.data.val_benchmarks=",
      "--config.data.train_files=configs/tiny.py",
    ],
    "model.path='/tmp' has no config.json",
  ),
  (
    "exchange URL that cannot be opened",
    "prorl_jax.main",
    ["--config=configs/tiny.py", "--config.rollout.exchange=bogus://x/y"],
    "rollout.exchange: exchange 'bogus://x/y': Parsing spec from url",
  ),
  (
    "config listing typo",
    "prorl_jax.cli.config",
    ["--config.rollout.nn=3"],
    "did you mean --config.rollout.n?",
  ),
  (
    "eval suite without its data",
    "prorl_jax.cli.eval",
    ["--suite=prorl-eval", "--checkpoint=/tmp", "--out=/tmp/x"],
    "--suite needs --data=DIR",
  ),
  (
    "eval suite on a directory that is not one",
    "prorl_jax.cli.eval",
    ["--suite=prorl-eval", "--data=/tmp", "--checkpoint=/tmp", "--out=/tmp/x"],
    "/tmp: not an evaluation suite",
  ),
  (
    "plot of a directory without metrics",
    "prorl_jax.cli.plot",
    ["/tmp"],
    "/tmp has no metrics.jsonl",
  ),
  (
    "a boolean that is not one",
    "prorl_jax.main",
    ["--config=configs/tiny.py", "--config.rollout.pipeline=maybe"],
    "--config.rollout.pipeline=maybe: maybe is not a boolean: use True or False",
  ),
  (
    "an integer that is not one",
    "prorl_jax.main",
    ["--config=configs/tiny.py", "--config.rollout.n=many"],
    "--config.rollout.n=many: many is not an integer",
  ),
  (
    "a number that is not one",
    "prorl_jax.main",
    ["--config=configs/tiny.py", "--config.algo.kl_coef=x"],
    "--config.algo.kl_coef=x: x is not a number",
  ),
  (
    "export of a directory without checkpoints",
    "prorl_jax.cli.export",
    ["/tmp", "/tmp/out"],
    "/tmp holds no Orbax checkpoint",
  ),
  (
    "a config field without its prefix",
    "prorl_jax.main",
    ["--config=configs/tiny.py", "--total_steps=3"],
    "--total_steps is not a flag of this command; did you mean --config.total_steps?",
  ),
  (
    "a nested config field without its prefix",
    "prorl_jax.main",
    ["--config=configs/tiny.py", "--kl_coef=0"],
    "did you mean --config.algo.kl_coef?",
  ),
  (
    "a config field without its prefix, to the evaluation",
    "prorl_jax.cli.eval",
    ["--config=configs/tiny.py", "--checkpoint=/tmp", "--rollout.n=2"],
    "--rollout.n is not a flag of this command; did you mean --config.rollout.n?",
  ),
  (
    "prepare from an unknown source",
    "prorl_jax.cli.prepare",
    ["--mix=prorl", "--out=/tmp/x", "--source=nope=/tmp"],
    "--source nope: unknown source",
  ),
]


@pytest.mark.parametrize("what,module,args,says", CASES, ids=[c[0] for c in CASES])
def test_user_errors_are_one_line(what, module, args, says, tmp_path):
  if module == "prorl_jax.main" and not any("run_dir" in a for a in args):
    args = [*args, f"--config.run_dir={tmp_path / 'run'}"]  # not a run of the checkout's runs/
  proc = _run(module, args)
  err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
  assert proc.returncode == 2, (what, proc.returncode, proc.stderr[-2000:])
  assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
  assert err[-1].startswith("error: ") and says in err[-1], err[-3:]


def test_errors_after_the_tokenizer_are_one_line_too(base, rows, tmp_path):
  proc = _run("prorl_jax.main", _model_args(base, rows, tmp_path) + ["--config.mesh.data=3"])
  assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
  assert "mesh data=3" in proc.stderr.splitlines()[-1]
  assert not (tmp_path / "run").exists()  # a failed start leaves no empty run dir behind


def test_a_model_directory_without_weights_is_one_line_before_any_worker(base, rows, tmp_path):
  """config.json and a tokenizer but no safetensors (a partial download): prorl-train and
  prorl-eval each say so in one line, before a model is loaded or a worker started."""
  import shutil

  shell = tmp_path / "shell"
  shutil.copytree(base, shell, ignore=shutil.ignore_patterns("*.safetensors*"))
  assert (shell / "config.json").exists() and not list(shell.glob("*.safetensors"))
  args = _model_args(shell, rows, tmp_path)
  for module, extra in (("prorl_jax.main", []), ("prorl_jax.cli.eval", [f"--checkpoint={shell}"])):
    proc = _run(module, args + extra)
    err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "has config.json but no weights (model.safetensors" in err[-1], err[-3:]
    assert "hf download" in err[-1] and not (tmp_path / "run" / "workers").exists()


def test_debug_shows_the_traceback():
  proc = _run(
    "prorl_jax.main", ["--config=configs/tiny.py", "--config.algo.clip_low=1.5", "--debug"]
  )
  assert proc.returncode != 0 and "Traceback" in proc.stderr
  env_proc = _run(
    "prorl_jax.main",
    ["--config=configs/tiny.py", "--config.algo.clip_low=1.5"],
    env_extra={"PRORL_DEBUG": "1"},
  )
  assert "Traceback" in env_proc.stderr


def test_a_status_command_says_a_user_error_in_one_line(capsys, monkeypatch):
  from prorl_jax.cli import errors

  def bad():
    raise ValueError("--out: no such\n  directory")

  monkeypatch.delenv("PRORL_DEBUG", raising=False)
  monkeypatch.setattr("sys.argv", ["prog"])
  assert errors.exit_status(bad, ValueError) == 2
  assert capsys.readouterr().err == "error: --out: no such directory\n"
  assert errors.exit_status(lambda: 0, ValueError) == 0
  with pytest.raises(KeyError):  # not a user error: its traceback
    errors.exit_status(lambda: {}["x"], ValueError)
  monkeypatch.setenv("PRORL_DEBUG", "1")
  with pytest.raises(ValueError, match="no such"):
    errors.exit_status(bad, ValueError)


@pytest.mark.parametrize("module", ["prepare", "export", "plot", "audit", "worker", "layout"])
def test_every_command_without_a_config_reads_absl_flags_alike(module, capsys):
  import importlib

  cmd = importlib.import_module(f"prorl_jax.cli.{module}")
  assert cmd.main(["--no_such_flag=1"]) == 2  # one line, status 2, no traceback
  err = capsys.readouterr().err
  assert err.startswith("error: ") and "no_such_flag" in err and err.count("\n") == 1
  with pytest.raises(SystemExit) as e:
    cmd.main(["--help"])
  assert e.value.code == 0 and "flags:" in capsys.readouterr().out


def test_a_command_reads_its_flags_afresh_each_time(tmp_path, capsys):
  from prorl_jax.cli import flags as cli_flags
  from prorl_jax.cli import prepare

  fv = prepare.FLAGS
  assert cli_flags.parse(fv, ["--mix=prorl", "--out=a", "--count=math=1"], prog="p", about="") == []
  assert (fv.mix, fv.out, fv.count, fv.check_references) == ("prorl", "a", ["math=1"], True)
  assert (
    cli_flags.parse(
      fv, ["--suite=prorl-eval", "--out=b", "--nocheck_references"], prog="p", about=""
    )
    == []
  )
  assert (fv.mix, fv.out, fv.count, fv.check_references) == (None, "b", [], False)  # nothing kept
  assert cli_flags.parse(fv, ["--out=c"], prog="p", about="") is None  # --mix or --suite
  assert "Exactly one of (mix, suite)" in capsys.readouterr().err
  assert cli_flags.parse(fv, ["--mix=prorl", "--out=c", "extra"], prog="p", about="") is None
  assert "unexpected arguments ['extra']" in capsys.readouterr().err
