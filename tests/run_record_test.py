"""What a run directory records and how a second start treats it: a changed config is refused
(or accepted and recorded), a finished run is left alone; progress for people and for logs."""

import io
import json
import os
import re

import pytest

from prorl_jax import config as config_lib
from prorl_jax.trainer import loop, run_record, versions
from prorl_jax.trainer.metrics import MetricWriter


def _cfg(tmp_path, **algo):
  c = config_lib.base_config()
  c.run_dir = str(tmp_path / "run")
  for k, v in algo.items():
    c.algo[k] = v
  return c


def _started(cfg, step: int):
  """A run directory as the trainer leaves it: its record and a checkpoint step directory."""
  os.makedirs(os.path.join(cfg.run_dir, "checkpoints", str(step), "state"))
  run_record.record_run(cfg, "/models/base")


def test_a_changed_config_is_refused_with_its_differences(tmp_path):
  _started(_cfg(tmp_path), 5)
  new = _cfg(tmp_path, clip_high=0.3, kl_coef=0.0)
  new.total_steps = 9000  # how long it runs is not a change of what it learns
  with pytest.raises(config_lib.ConfigError) as e:
    run_record.check_resume_config(new, accept=False)
  msg = str(e.value)
  assert "algo.clip_high: 0.28 -> 0.3" in msg and "algo.kl_coef: 0.0001 -> 0.0" in msg
  assert "total_steps" not in msg and "--accept_config_changes" in msg and "\n" not in msg


def test_a_field_added_since_the_run_started_is_no_change_at_its_default(tmp_path):
  """A run recorded before a config field existed resumes under the new field's default; set
  to another value, it is a change like any other."""
  cfg = _cfg(tmp_path)
  _started(cfg, 5)
  path = os.path.join(cfg.run_dir, "config.json")
  rec = json.load(open(path))
  del rec["config"]["vllm"]["lora"], rec["config"]["algo"]["clip_high"]
  json.dump(rec, open(path, "w"))
  assert run_record.check_resume_config(_cfg(tmp_path), accept=True) == []
  new = _cfg(tmp_path, clip_high=0.3)
  new.vllm.lora = "adapter"
  assert run_record.check_resume_config(new, accept=True) == [
    "algo.clip_high: None -> 0.3",
    "vllm.lora: None -> 'adapter'",
  ]


def test_accepted_changes_are_recorded(tmp_path):
  _started(_cfg(tmp_path), 5)
  new = _cfg(tmp_path, clip_high=0.3)
  changes = run_record.check_resume_config(new, accept=True)
  assert changes == ["algo.clip_high: 0.28 -> 0.3"]
  run_record.record_run(new, "/models/base", changes)
  rec = json.load(open(os.path.join(new.run_dir, "config.json")))
  assert rec["config"]["algo"]["clip_high"] == 0.3
  assert rec["accepted_changes"][0]["changes"] == changes
  assert run_record.check_resume_config(new, accept=False) == []  # the record is the new config


def test_a_fresh_run_directory_has_nothing_to_compare(tmp_path):
  cfg = _cfg(tmp_path)
  os.makedirs(cfg.run_dir)
  run_record.record_run(_cfg(tmp_path, clip_high=0.5), "/m")  # a record but no checkpoint yet
  assert run_record.check_resume_config(cfg, accept=False) == []


def test_a_finished_run_says_so_and_leaves_its_summary(tmp_path, capsys):
  cfg = _cfg(tmp_path)
  cfg.total_steps = 5
  _started(cfg, 5)
  summary = os.path.join(cfg.run_dir, "summary.json")
  with open(summary, "w") as f:
    f.write('{"pass@1_end": 0.5, "steps": 5}')
  got = loop.run(cfg)  # returns before any model is loaded (model.path is empty)
  assert got == {"finished": True, "steps": 5}
  assert "is finished: step 5 of total_steps=5" in capsys.readouterr().out
  assert open(summary).read() == '{"pass@1_end": 0.5, "steps": 5}'


@pytest.mark.parametrize("summary", [None, '{"steps": 3}', "{not json"])
def test_a_run_with_its_last_checkpoint_but_no_summary_of_it_is_not_finished(tmp_path, summary):
  """Stopped after its last update (during the final validation, before the summary, or a
  summary of an earlier total_steps): it goes on to load the model, to finish the run."""
  cfg = _cfg(tmp_path)
  cfg.total_steps = 5
  _started(cfg, 5)
  if summary is not None:
    with open(os.path.join(cfg.run_dir, "summary.json"), "w") as f:
      f.write(summary)
  with pytest.raises(config_lib.ConfigError, match="model.path is empty"):
    loop.run(cfg)


def test_progress_is_one_line_per_step_in_a_log(tmp_path, monkeypatch):
  out = io.StringIO()
  monkeypatch.setattr("sys.stdout", out)
  w = MetricWriter(str(tmp_path), False, "", total_steps=10, hparams={})
  w.progress(1, 0, "reward 0.500")
  w.progress(2, 0, "reward 0.600")
  w.say("validation at step 2: pass@1 0.1000")
  w.close()
  lines = out.getvalue().splitlines()
  assert "\r" not in out.getvalue() and len(lines) == 3
  stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d "  # each step line says when it was written
  assert re.match(stamp + r"step 1/10 reward 0\.500 \(", lines[0]), lines[0]
  assert re.match(stamp + r"step 2/10 reward 0\.600 \(", lines[1]) and lines[2].startswith("valid")


def test_the_eta_leaves_out_the_first_step_of_a_session(tmp_path, monkeypatch):
  """The first step compiles: the rate (and so the ETA) is measured from its end on."""
  out = io.StringIO()
  monkeypatch.setattr("sys.stdout", out)
  clock = iter([100.0, 160.0, 170.0, 180.0])  # writer made at 100, first step done at 160
  monkeypatch.setattr("prorl_jax.trainer.metrics.time.time", lambda: next(clock))
  w = MetricWriter(str(tmp_path), False, "", total_steps=10, hparams={})
  for step in (1, 2, 3):
    w.progress(step, 0, "")
  lines = out.getvalue().splitlines()
  assert "(60.0 s/step, eta 9m00s)" in lines[0]  # nothing better known yet
  assert "(10.0 s/step, eta 1m20s)" in lines[1] and "(10.0 s/step, eta 1m10s)" in lines[2]


def test_validation_line_is_rounded_per_benchmark():
  line = versions.val_line(
    50,
    {
      "pass@1": 0.123456789,
      "aime24/pass@1": 0.0625,
      "gpqa_diamond/pass@1": 0.3,
      "aime24/pass@4": 0.2,
      "verifier_failures": 3,
    },
  )
  assert line == (
    "validation at step 50: pass@1 0.1235 | aime24 0.0625 | gpqa_diamond 0.3000 "
    "(3 verifier failures)"
  )
