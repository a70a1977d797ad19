"""`eval --suite`: pass@1 by hand, and the suite end to end on the tiny model with fixture
benchmark files (real workers, real verifiers), cached on a rerun."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from prorl_jax.cli import prepare
from prorl_jax.data import suite as suite_lib
from prorl_jax.demo import tiny_base
from prorl_jax.evaluation import runner, suite_report
from prorl_jax.trainer.scoring import summarize
from tests.suite_test import FIXTURES, _write_sources

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_pass_at_1_is_the_mean_of_binary_scores_without_failed_samples():
  scores = np.array([[1.0, 0.5, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0], [1.0, 1.0, 0.2, 0.2]])
  failed = np.array([[False, False, False, True], [False] * 4, [True, True, True, True]])
  got = summarize(scores, failed, continuous=False, ks=[2])
  # prompt 0: samples 1, 0.5, 1 -> 2/3 correct; prompt 1: 1/4; prompt 2: no usable sample.
  assert got["pass@1"] == pytest.approx((2 / 3 + 1 / 4) / 2)
  # pass@2: prompt 0 (n=3, c=2): 1; prompt 1 (n=4, c=1): 1 - C(3,2)/C(4,2) = 0.5.
  assert got["pass@2"] == pytest.approx(0.75)
  assert got["verifier_failures"] == 5 and got["prompts"] == 3 and got["samples"] == 4
  cont = summarize(scores, failed, continuous=True, ks=[])
  assert cont["pass@1"] == pytest.approx(((1 + 0.5 + 1) / 3 + 0.25) / 2)
  mixed = summarize(scores[:2], failed[:2], continuous=[True, False], ks=[])
  assert mixed["pass@1"] == pytest.approx((2.5 / 3 + 0.25) / 2)


def test_markdown_report_puts_published_numbers_beside_ours():
  refs = suite_report.load_references(suite_report.REFERENCES)
  results = {
    "aime24": {
      "domain": "math",
      "summary": {
        "pass@1": 0.25,
        "metric": "pass@1",
        "prompts": 30,
        "samples": 16,
        "verifier_failures": 2,
        "dropped_too_long": 0,
      },
    }
  }
  rep = suite_report.build_report(
    results,
    {"suite": "prorl-eval"},
    label="m",
    settings={
      "temperature": 0.6,
      "top_p": 0.95,
      "max_response_len": 32768,
      "max_prompt_len": 4096,
      "seed": 0,
    },
    samples=runner.DEFAULT_SAMPLES,
    references=refs,
  )
  md = suite_report.report_markdown(rep)
  assert "| aime24 | 28.54 | 48.13 | 49.58 | 25.00 (2 verifier failures) |" in md
  assert "## Math" in md and "DeepSeek-R1-Distill-Qwen-1.5B" in md


def test_published_numbers_cover_the_suite_and_match_the_papers_averages():
  refs = suite_report.load_references(suite_report.REFERENCES)
  assert set(refs["numbers"]) == set(suite_lib.BENCHMARKS)
  by_domain: dict[str, list[str]] = {}
  for name, b in suite_lib.BENCHMARKS.items():
    by_domain.setdefault(b.domain, []).append(name)

  def avg(col, domain):
    return np.mean([refs["numbers"][n][col] for n in by_domain[domain]])

  # The "Avg" columns of arXiv:2505.24864v1 Tables 1 and 2, against the transcribed cells.
  assert avg("r1_distill_1.5b", "math") == pytest.approx(44.45, abs=0.006)
  assert avg("prorl_v1", "math") == pytest.approx(60.14, abs=0.006)
  assert avg("r1_distill_1.5b", "code") == pytest.approx(23.08, abs=0.006)
  assert avg("prorl_v1", "code") == pytest.approx(37.49, abs=0.006)
  # ProRL v2: the "Avg" columns of its model card's Tables 1 and 2; no OOD logic numbers there.
  assert avg("prorl_v2", "math") == pytest.approx(61.69, abs=0.006)
  assert avg("prorl_v2", "code") == pytest.approx(41.03, abs=0.006)
  assert refs["numbers"]["reasoning_gym_ood"]["prorl_v2"] is None
  assert all(
    v["prorl_v2"] is not None for k, v in refs["numbers"].items() if k != "reasoning_gym_ood"
  )


def _summary(p):
  return {
    "pass@1": p,
    "metric": "pass@1",
    "prompts": 30,
    "samples": 16,
    "verifier_failures": 0,
    "dropped_too_long": 0,
  }


SETTINGS = {"temperature": 0.6, "top_p": 0.95, "max_response_len": 32768, "max_prompt_len": 4096}


def test_measured_columns_sit_beside_ours_and_name_what_differs(tmp_path):
  manifest = {
    "suite": "prorl-eval",
    "benchmarks": {"aime24": {"file": "a.jsonl"}, "aime25": {"file": "b.jsonl"}},
    "files": {"a.jsonl": {"sha256": "aa"}, "b.jsonl": {"sha256": "bb"}},
  }
  refs = suite_report.load_references(suite_report.REFERENCES)

  def report(p24, p25, **settings):
    return suite_report.build_report(
      {
        "aime24": {"domain": "math", "summary": _summary(p24)},
        "aime25": {"domain": "math", "summary": _summary(p25)},
      },
      manifest,
      label="m",
      settings=dict(SETTINGS, **settings),
      samples=runner.DEFAULT_SAMPLES,
      references=refs,
    )

  base = report(0.25, 0.125, max_response_len=8192)
  base["files"]["aime25"] = "other"  # an older copy of the AIME25 file
  suite_report.write_report(base, str(tmp_path / "base"))
  v2 = report(0.5, None)  # AIME25 without a usable sample
  suite_report.write_report(v2, str(tmp_path / "v2"))

  measured = suite_report.load_compare([f"base={tmp_path / 'base'}", f"v2={tmp_path / 'v2'}"])
  rep = suite_report.build_report(
    {
      "aime24": {"domain": "math", "summary": _summary(0.75)},
      "aime25": {"domain": "math", "summary": _summary(0.5)},
    },
    manifest,
    label="run",
    settings=SETTINGS,
    samples=runner.DEFAULT_SAMPLES,
    references=refs,
    measured=measured,
  )
  md = suite_report.report_markdown(rep)
  head = "| Benchmark | DeepSeek-R1-Distill-Qwen-1.5B | ProRL v1"
  assert head in md and "| base (measured) | v2 (measured) | This model |" in md
  assert "| aime24 | 28.54 | 48.13 | 49.58 | 25.00 | 50.00 | 75.00 |" in md
  assert "| aime25 | 22.71 | 33.33 | 36.04 | 12.50 | — | 50.00 |" in md
  # averages: base (25 + 12.5) / 2; v2 has a gap; ours (75 + 50) / 2
  assert "| **average** | 25.62 | 40.73 | 42.81 | 18.75 | — | 62.50 |" in md
  diff = rep["measured_columns"]["base"]["differences"]
  assert diff == ["max_response_len 8192 (here 32768)", "other benchmark files for aime25"]
  assert rep["measured_columns"]["v2"]["differences"] == []
  assert "differs: max_response_len 8192 (here 32768); other benchmark files for aime25" in md
  suite_report.report_png(rep, str(tmp_path / "r.png"))
  assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
  "item, msg",
  [
    ("nolabel", "want LABEL=DIR"),
    ("=dir", "want LABEL=DIR"),
    ("a|b=dir", "without '|'"),
    ("x={missing}", "no readable report in"),
    ("x={bad}", "no readable report in"),
  ],
)
def test_bad_compare_is_one_line(tmp_path, item, msg):
  (tmp_path / "bad").mkdir()
  (tmp_path / "bad" / "report.json").write_text('{"benchmarks": [1]}')
  item = item.format(missing=tmp_path / "nope", bad=tmp_path / "bad")
  with pytest.raises(suite_report.SuiteError, match=re.escape(msg)) as e:
    suite_report.load_compare([item])
  assert "\n" not in str(e.value)


def test_compare_label_twice_is_refused(tmp_path):
  suite_report.write_report(
    suite_report.build_report(
      {"aime24": {"domain": "math", "summary": _summary(0.5)}},
      {},
      label="m",
      settings=SETTINGS,
      samples=runner.DEFAULT_SAMPLES,
      references=suite_report.load_references(suite_report.REFERENCES),
    ),
    str(tmp_path),
  )
  with pytest.raises(suite_report.SuiteError, match="given twice"):
    suite_report.load_compare([f"a={tmp_path}", f"a={tmp_path}"])


def test_bad_reference_file_is_one_line(tmp_path):
  p = tmp_path / "r.json"
  p.write_text("[1]")
  with pytest.raises(suite_report.SuiteError, match="not a reference-numbers file"):
    suite_report.load_references(str(p))


def _eval(args, timeout=600):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", XLA_FLAGS="")
  return subprocess.run(
    [sys.executable, "-m", "prorl_jax.cli.eval", "--suite=prorl-eval", "--config=configs/tiny.py"]
    + args,
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=timeout,
  )


@pytest.mark.slow
def test_suite_end_to_end_on_the_tiny_model(tmp_path):
  data = tmp_path / "suite"
  benches = "aime24,gpqa_diamond,ifeval,reasoning_gym"
  assert (
    prepare.main(
      [
        "--suite=prorl-eval",
        f"--out={data}",
        f"--benchmarks={benches}",
        "--rg_per_task=3",
        "--rg_tasks=basic_arithmetic",
      ]
      + _write_sources(tmp_path, FIXTURES)
    )
    == 0
  )
  base = tiny_base.build(str(tmp_path / "base"))
  out = tmp_path / "report"
  args = [
    f"--data={data}",
    f"--checkpoint={base}",
    f"--out={out}",
    "--max_response_len=8",
    "--samples=math=16",
    "--samples=stem=16",
    "--samples=instruction_following=8",
    "--samples=logic=2",
    "--max_prompt_len=1024",
  ]
  proc = _eval(args)
  assert proc.returncode == 0, proc.stderr[-3000:]
  rep = json.loads((out / "report.json").read_text())
  assert list(rep["domains"]) == ["math", "stem", "instruction_following", "logic"]
  assert set(rep["reference_columns"]) == {"r1_distill_1.5b", "prorl_v1", "prorl_v2"}
  rows = {r["benchmark"]: r for t in rep["domains"].values() for r in t["rows"]}
  assert set(rows) == set(benches.split(","))
  assert rows["aime24"]["reference"]["r1_distill_1.5b"] == 28.54
  for name, row in rows.items():
    rec = json.loads((out / "benchmarks" / f"{name}.json").read_text())
    s, f = np.array(rec["scores"]), np.array(rec["verifier_failed"], bool)
    assert (
      s.shape[1]
      == row["samples"]
      == {"aime24": 16, "gpqa_diamond": 16, "ifeval": 8, "reasoning_gym": 2}[name]
    )
    per_prompt = [
      (v[~m] if name in ("ifeval", "reasoning_gym") else (v[~m] >= 1.0)) for v, m in zip(s, f)
    ]
    assert row["ours"] == pytest.approx(100 * np.mean([p.mean() for p in per_prompt])), name
  assert rows["gpqa_diamond"]["prompts"] == 4 and rows["reasoning_gym"]["prompts"] == 3
  # An untrained tiny model writing 8 tokens solves nothing: a verifier that pays everything
  # (aime24 = 100 for a random model) fails here; and no response was a verifier failure.
  for name in ("aime24", "gpqa_diamond", "reasoning_gym"):
    assert rows[name]["ours"] == 0.0, (name, rows[name])
    rec = json.loads((out / "benchmarks" / f"{name}.json").read_text())
    assert not np.array(rec["verifier_failed"]).any(), name
  assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert "| aime24 | 28.54 | 48.13 |" in (out / "report.md").read_text()
  # Every benchmark cached: no worker starts. The first report goes beside it as a measured
  # column (as the base model's report would): same numbers, same settings and files.
  again = _eval(args + [f"--compare=first run={out}"], timeout=300)
  assert again.returncode == 0, again.stderr[-3000:]
  assert again.stdout.count(": cached, pass@1") == 4
  rep2 = json.loads((out / "report.json").read_text())
  rows2 = {r["benchmark"]: r for t in rep2["domains"].values() for r in t["rows"]}
  for name, row in rows.items():
    assert rows2[name]["ours"] == row["ours"]
    assert rows2[name]["measured"] == {"first run": row["ours"]}
  assert rep2["measured_columns"]["first run"]["differences"] == []
  md = (out / "report.md").read_text()
  assert "| Benchmark | DeepSeek-R1-Distill-Qwen-1.5B |" in md and "first run (measured) |" in md
  assert "same settings and benchmark files" in md


def test_unknown_checkpoint_is_one_line(tmp_path):
  proc = _eval(
    [f"--data={tmp_path}", f"--checkpoint={tmp_path / 'nope'}", f"--out={tmp_path}"], timeout=120
  )
  assert proc.returncode != 0
  assert proc.stderr.strip().splitlines()[-1].startswith("error: ")
  assert "not an evaluation suite" in proc.stderr


def test_the_report_names_a_checkpoint_by_run_and_step():
  assert suite_report.model_title("/x/runs/prorl_v2/checkpoints/10") == "prorl_v2 step 10"
  assert suite_report.model_title("/models/r1-1.5b/") == "r1-1.5b"
  assert suite_report.model_title("runs/x/exchange@12") == "runs/x/exchange@12"
  assert suite_report.percent(0.125) == "12.50%" and suite_report.percent(None) == "n/a"


def test_the_response_budget_fits_the_model_and_the_engine_or_is_refused_in_one_line():
  fit = runner.fit_response_len
  assert fit(None, None, None) == 32768  # the paper's
  assert fit(None, 131072, None) == 32768
  assert fit(None, 256, None) == 256  # the model's context
  assert fit(None, 131072, 1024) == 1024  # what the JAX engine's config sizes
  assert fit(16, 256, 1024) == 16
  with pytest.raises(suite_report.SuiteError, match="over the config's rollout.max_response_len"):
    fit(32768, 131072, 1024)
  with pytest.raises(suite_report.SuiteError, match=r"max_position_embeddings 256\); ask for at"):
    fit(300, 256, None)


def test_a_failed_evaluation_keeps_the_worker_log_its_error_names(tmp_path):
  from prorl_jax.evaluation.serving import ServedModel

  base = tiny_base.build(str(tmp_path / "base"))
  seen = []

  class Workers:
    def stop(self):
      pass

  def start(url, log_dir, on_death):
    seen.append(log_dir)
    os.makedirs(log_dir, exist_ok=True)
    open(os.path.join(log_dir, "worker0.log"), "w").write("CUDA out of memory\n")
    return Workers()

  with pytest.raises(RuntimeError):
    with ServedModel(base, start):
      raise RuntimeError("worker 0 exited; its log ends: CUDA out of memory")
  assert os.path.isfile(os.path.join(seen[-1], "worker0.log"))  # still there to read
  with ServedModel(base, start):
    pass
  assert not os.path.exists(seen[-1])  # a clean exit leaves nothing behind
  kept = tmp_path / "report" / "workers"
  with ServedModel(base, start, str(kept)):
    pass
  assert (kept / "worker0.log").exists()  # the suite's, beside its report
