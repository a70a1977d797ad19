"""What a user meets around the run: help on every command, optional packages refused in one
line before anything loads, warnings for flags that cannot act, runs overlaid on one dashboard,
the sessions of a resumed run."""

import json
import os
import subprocess
import sys

import pytest

from prorl_jax import config as config_lib
from prorl_jax.cli import plot
from prorl_jax.trainer import metrics, preflight

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(module, args, **env):
  return subprocess.run(
    [sys.executable, "-m", module, *args],
    cwd=ROOT,
    env=dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", **env),
    capture_output=True,
    text=True,
    timeout=300,
  )


@pytest.mark.parametrize(
  "module,own_flags",
  [
    ("prorl_jax.main", ["--config"]),
    ("prorl_jax.cli.eval", ["--checkpoint", "--suite", "--samples", "--config"]),
    ("prorl_jax.cli.plot", ["RUN_DIR", "--out"]),
    ("prorl_jax.cli.export", ["--base", "--dtype"]),
    ("prorl_jax.cli.prepare", ["--mix", "--suite"]),
    ("prorl_jax.cli.worker", ["--exchange", "--engine"]),
    ("prorl_jax.cli.config", ["--config"]),
  ],
)
def test_help_prints_the_commands_own_flags_and_exits_0(module, own_flags):
  proc = _run(module, ["--help"])
  assert proc.returncode == 0, proc.stderr[-1500:]
  out = proc.stdout
  assert out.lstrip().startswith("usage:") and all(f in out for f in own_flags), out[:1500]
  assert "--helpfull" not in out and "--flagfile" not in out  # absl's own flags are not listed
  if module in ("prorl_jax.main", "prorl_jax.cli.eval"):
    assert "python -m prorl_jax.cli.config" in out  # where the config keys are


def test_wandb_without_the_package_is_one_line_with_the_fix_before_any_loading(tmp_path):
  pytest.importorskip("absl")
  if __import__("importlib").util.find_spec("wandb") is not None:
    pytest.skip("wandb is installed here: the refusal cannot be reached")
  run_dir = tmp_path / "run"
  proc = _run(
    "prorl_jax.main",
    ["--config=configs/tiny.py", f"--config.run_dir={run_dir}", "--config.metrics.wandb_project=x"],
    PRORL_CACHE_DIR=str(tmp_path / "cache"),
  )
  err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
  assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
  assert err[-1] == (
    "error: metrics.wandb_project='x' needs the wandb package, which is not installed: "
    "pip install -e '.[wandb]' (or: make venv EXTRAS=wandb)"
  )
  assert not (tmp_path / "cache").exists()  # refused before the demo's base model was built


def _cfg(**overrides):
  cfg = config_lib.base_config()
  for key, value in overrides.items():
    *section, field = key.split("__")
    (cfg[section[0]] if section else cfg)[field] = value
  return cfg


def test_flags_that_cannot_act_are_named():
  # 512 prompts / 64 per update = 8 updates: the clip acts; the defaults warn of nothing
  assert preflight.inert_flags(_cfg()) == []
  one_update = _cfg(rollout__mini_batch_prompts=512, algo__clip_high=0.4)
  assert preflight.updates_per_step(one_update) == 1
  [line] = preflight.inert_flags(one_update)
  assert line.startswith("algo.clip_high cannot act: rollout.prompts_per_step") and "= 1" in line
  assert (
    preflight.inert_flags(
      _cfg(rollout__mini_batch_prompts=512, algo__epochs=2, algo__clip_high=0.4)
    )
    == []
  )
  no_kl = preflight.inert_flags(_cfg(algo__kl_coef=0.0, algo__kl_kind="k3"))
  assert no_kl == [
    "algo.kl_kind cannot act with algo.kl_coef=0 (no KL term)",
    "reference resets (algo.ref_reset_every / ref_reset_stall_evals) change nothing with "
    "algo.kl_coef=0: the reference policy is used only by the KL term",
  ]
  assert preflight.inert_flags(_cfg(algo__kl_coef=0.0, algo__ref_reset_every=0)) == []
  short = preflight.inert_flags(_cfg(algo__ref_reset_every=400, total_steps=100))
  assert short == [
    "algo.ref_reset_every=400 >= total_steps=100: no scheduled reference reset happens in this run",
    "eval.every=50 > total_steps=100: the run validates only at its start and end",
  ] or short[0].startswith("algo.ref_reset_every=400")
  assert preflight.inert_flags(_cfg(algo__tis_cap=3.0)) == [
    "algo.tis_cap acts only with algo.is_correction=tis (it is 'icepop')"
  ]
  assert preflight.inert_flags(_cfg(algo__overlong_factor=0.5)) == [
    "algo.overlong_factor cannot act with algo.overlong_buffer=0 (the penalty is off)"
  ]
  assert preflight.inert_flags(_cfg(vllm__lora="adapter")) == [
    "vllm.lora acts only on a LoRA run's adapter versions (lora.rank > 0, lora.publish=adapters; "
    "they are 0, 'adapters')"
  ]
  assert preflight.inert_flags(_cfg(vllm__lora="adapter", lora__rank=8)) == []


def test_the_tiny_smoke_run_warns_that_its_clip_flags_cannot_act():
  import ml_collections.config_flags  # noqa: F401 - the configs import ml_collections

  sys.path.insert(0, ROOT)
  import importlib

  tiny = importlib.import_module("configs.tiny").get_config("smoke")
  tiny.algo.clip_high = 0.4
  tiny.rollout.mini_batch_prompts = tiny.rollout.prompts_per_step
  assert any(line.startswith("algo.clip_high cannot act") for line in preflight.inert_flags(tiny))


def _metrics(run_dir, rows):
  os.makedirs(run_dir, exist_ok=True)
  with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in rows)


def test_plot_overlays_runs_with_a_legend_naming_each(tmp_path):
  import matplotlib

  matplotlib.use("Agg")
  from matplotlib import pyplot as plt

  for name, slope in (("baseline", 0.1), ("clip_high_0.4", 0.2)):
    _metrics(
      str(tmp_path / name),
      [{"step": s, "reward/raw_mean": slope * s, "val/pass@1": slope} for s in range(1, 6)],
    )
  seen = {}
  real = plt.Figure.savefig

  def spy(fig, path, **kw):  # the legends of the figure being written, and each line's data
    seen["labels"] = [
      t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()
    ]
    seen["lines"] = {
      ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata()))
      for ax in fig.axes
      for ln in ax.get_lines()
      if not ln.get_label().startswith("_")
    }
    return real(fig, path, **kw)

  plt.Figure.savefig = spy
  try:
    out = plot.dashboard([str(tmp_path / "baseline"), str(tmp_path / "clip_high_0.4")])
  finally:
    plt.Figure.savefig = real
  assert out == str(tmp_path / "baseline" / "compare.png") and os.path.getsize(out) > 10_000
  assert "baseline: raw_mean" in seen["labels"] and "clip_high_0.4: raw_mean" in seen["labels"]
  assert "baseline: pass@1" in seen["labels"] and "clip_high_0.4: pass@1" in seen["labels"]
  for name, slope in (("baseline", 0.1), ("clip_high_0.4", 0.2)):  # each run's own data
    xs, ys = seen["lines"][f"{name}: raw_mean"]
    assert xs == [1, 2, 3, 4, 5] and ys == pytest.approx([slope * s for s in range(1, 6)]), name
    assert seen["lines"][f"{name}: pass@1"][1] == pytest.approx([slope] * 5), name
  proc = _run(
    "prorl_jax.cli.plot",
    [str(tmp_path / "baseline"), str(tmp_path / "clip_high_0.4"), f"--out={tmp_path / 'ab.png'}"],
  )
  assert proc.returncode == 0 and os.path.isfile(tmp_path / "ab.png"), proc.stderr[-1500:]


def test_wall_seconds_total_adds_up_every_session(tmp_path):
  run = str(tmp_path)
  with open(os.path.join(run, metrics.SESSIONS), "w") as f:
    for mark in (
      {"start": 100.0, "step": 0, "resumed": False},  # killed: its last row at 130
      {"start": 200.0, "step": 2, "resumed": True},
      {"end": 260.0},  # clean: 60 s
      {"start": 300.0, "step": 5, "resumed": True},
    ):  # this one, until now=310
      f.write(json.dumps(mark) + "\n")
  _metrics(
    run,
    [
      {"step": 1, metrics.CLOCK: 120.0},
      {"step": 2, metrics.CLOCK: 130.0},
      {"step": 3, metrics.CLOCK: 250.0},
    ],
  )
  assert metrics.wall_seconds_total(run, now=310.0) == 30.0 + 60.0 + 10.0
  assert plot._resumes(run) == [2, 5]


def test_the_demo_base_is_built_once_per_settings_for_every_run_dir(tmp_path, monkeypatch):
  from prorl_jax.demo import warm_start
  from prorl_jax.trainer.plan import Plan
  from prorl_jax.trainer.setup import resolve_model_path

  monkeypatch.setenv("PRORL_CACHE_DIR", str(tmp_path / "cache"))
  built = []
  monkeypatch.setattr(warm_start, "build", lambda path, **kw: built.append((path, kw)) or path)
  cfg = config_lib.base_config()
  cfg.model.build_tiny = True
  a = resolve_model_path(Plan.from_config(cfg))
  cfg.run_dir = str(tmp_path / "another_run")
  assert resolve_model_path(Plan.from_config(cfg)) == a
  assert a.startswith(str(tmp_path / "cache" / "tiny-base-seed0-"))
  cfg.seed = 1
  assert resolve_model_path(Plan.from_config(cfg)) != a  # other settings, another base
  assert [kw for _, kw in built] == [{"seed": 0}, {"seed": 0}, {"seed": 1}]


def test_the_smoke_config_has_its_own_run_dir():
  sys.path.insert(0, ROOT)
  import importlib

  tiny = importlib.import_module("configs.tiny")
  assert tiny.get_config("smoke").run_dir != tiny.get_config().run_dir


def test_a_malformed_training_row_is_named_before_the_base_model_is_built(tmp_path):
  rows = tmp_path / "train.jsonl"
  good = {"data_source": "chain_sum", "prompt": "1+2", "reward_model": {"ground_truth": "3"}}
  rows.write_text(json.dumps(good) + "\n" + json.dumps({"data_source": "chain_sum"}) + "\n")
  proc = _run(
    "prorl_jax.main",
    [
      "--config=configs/tiny.py",
      f"--config.run_dir={tmp_path / 'run'}",
      f"--config.data.train_files={rows}",
    ],
    PRORL_CACHE_DIR=str(tmp_path / "cache"),
  )
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert proc.stderr.strip().splitlines()[-1] == (
    f"error: {rows}: row 2: 'prompt' must be a list of {{role, content}} chat messages"
  )
  assert not (tmp_path / "cache").exists() and not (tmp_path / "run").exists()


def test_a_stop_asked_before_the_watch_exists_is_kept():
  """The handler `python -m prorl_jax.main` installs on its first line keeps the request, and
  the trainer's Watch, made once the flags are parsed, starts from it."""
  import signal

  from prorl_jax.trainer import preemption

  preemption._early_handler(signal.SIGTERM, None)
  try:
    watch = preemption.Watch(on_signal=True)
    assert watch.requested() and watch.why == "SIGTERM"
    assert watch.since == preemption._EARLY["since"]
    watch.close()
  finally:
    preemption._EARLY.clear()
  watch = preemption.Watch(on_signal=True)
  assert not watch.requested()
  watch.close()


def test_the_entry_point_handles_sigterm_before_its_first_import(tmp_path):
  """`python -m prorl_jax.main` catches SIGTERM before it imports anything heavy: an `absl`
  placed first on the path reports the handler it finds when the entry point imports it."""
  fake = tmp_path / "absl"
  fake.mkdir()
  (fake / "__init__.py").write_text(
    "import signal, sys\n"
    "h = signal.getsignal(signal.SIGTERM)\n"
    "print('handler:', getattr(h, '__qualname__', h))\n"
    "sys.exit(3)\n"
  )
  env = dict(os.environ, PYTHONPATH=f"{tmp_path}:{ROOT}")
  out = subprocess.run(
    [sys.executable, "-m", "prorl_jax.main", "--config=configs/tiny.py"],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=60,
  )
  assert out.returncode == 3 and out.stdout.strip() == "handler: _early_handler", out


def test_a_sigterm_while_the_run_loads_stops_it_with_the_requeue_status(tmp_path):
  """The stop is heeded from the entry point's first line: a SIGTERM while JAX and the model
  load ends the run at its first safe point with exit 75 (nothing trained), not killed by the
  signal."""
  import signal

  from prorl_jax.demo import tiny_base

  base = tiny_base.build(str(tmp_path / "base"))
  rows = tmp_path / "train.jsonl"
  good = {"data_source": "chain_sum", "prompt": "1+2", "reward_model": {"ground_truth": "3"}}
  rows.write_text(json.dumps(good) + "\n")
  run_dir = tmp_path / "run"
  proc = subprocess.Popen(
    [
      sys.executable,
      "-m",
      "prorl_jax.main",
      "--config=configs/tiny.py",
      f"--config.model.path={base}",
      f"--config.data.train_files={rows}",
      f"--config.run_dir={run_dir}",
      "--config.eval.every=0",
      "--config.total_steps=2",
    ],
    cwd=ROOT,
    env=dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu"),
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
  )
  for line in proc.stdout:  # `start` has begun: JAX is up, the model not yet loaded
    if "prorl_jax.trainer.loop process 0/1" in line:
      break
  proc.send_signal(signal.SIGTERM)
  out = proc.communicate(timeout=300)[0]
  assert proc.returncode == 75, out[-2000:]
  stopped = json.load(open(run_dir / "stopped.json"))
  assert (stopped["why"], stopped["stopped_at"]) == ("SIGTERM", 0), stopped
  assert not stopped["saved"] or (run_dir / "checkpoints" / "0").is_dir()  # the state at step 0


def _model_without(tmp_path, field: str) -> str:
  """A model directory (the tiny model's files) whose config.json lacks `field`."""
  from prorl_jax.model import presets

  model = tmp_path / f"model-{field}"
  model.mkdir()
  d = presets.tiny().to_hf_dict()
  d.pop(field)
  (model / "config.json").write_text(json.dumps(d))
  for name in ("model.safetensors", "tokenizer.json"):
    (model / name).write_text("{}")  # present: the config is read before either loads
  return str(model)


@pytest.mark.parametrize(
  "case", ["run_dir is a file", "config is no Python", "config without get_config",
           "config.json without num_attention_heads", "config.json without model_type"],
)  # fmt: skip
def test_a_newcomers_mistake_is_one_line_and_exit_2(tmp_path, case):
  """Mistakes met by following the README: each answers in one line naming what to fix, exit
  status 2, no traceback, before anything loads."""
  afile = tmp_path / "afile"
  afile.write_text("x")
  args = {
    "run_dir is a file": ["--config=configs/tiny.py", f"--config.run_dir={afile}"],
    "config is no Python": ["--config=README.md"],
    "config without get_config": ["--config=prorl_jax/records.py"],
    "config.json without num_attention_heads": [
      "--config=configs/tiny.py",
      f"--config.model.path={_model_without(tmp_path, 'num_attention_heads')}",
      f"--config.run_dir={tmp_path / 'run'}",
    ],
    "config.json without model_type": [
      "--config=configs/tiny.py",
      f"--config.model.path={_model_without(tmp_path, 'model_type')}",
      f"--config.run_dir={tmp_path / 'run'}",
    ],
  }[case]
  want = {
    "run_dir is a file": "is a file",
    "config is no Python": "not Python",
    "config without get_config": "defines no get_config()",
    "config.json without num_attention_heads": "lacks num_attention_heads",
    "config.json without model_type": "add \"model_type\": 'qwen2'",
  }[case]
  proc = _run("prorl_jax.main", args, PRORL_CACHE_DIR=str(tmp_path / "cache"))
  errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
  assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
  assert len(errors) == 1 and want in errors[0], proc.stderr[-2000:]


def test_the_dashboard_draws_only_panels_with_data_on_whole_steps(tmp_path):
  """A short run without hack flags: no empty panel, and the step axis ticks whole steps."""
  import matplotlib

  matplotlib.use("Agg")
  from matplotlib import pyplot as plt

  run = str(tmp_path / "short")
  _metrics(run, [{"step": s, "reward/raw_mean": 0.1 * s} for s in (3,)])
  seen = {}
  real = plt.Figure.savefig

  def spy(fig, path, **kw):
    shown = [ax for ax in fig.axes if ax.get_visible()]
    seen["titles"] = [ax.get_title() for ax in shown]
    seen["ticks"] = [
      t for ax in shown for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]
    ]
    return real(fig, path, **kw)

  plt.Figure.savefig = spy
  try:
    plot.dashboard(run)
  finally:
    plt.Figure.savefig = real
  assert seen["titles"] == ["reward"], seen["titles"]
  assert seen["ticks"] and all(float(t).is_integer() for t in seen["ticks"]), seen["ticks"]
