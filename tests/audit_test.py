"""`python -m prorl_jax.cli.audit` on fixture data: no strategy beats an honest wrong answer,
every reference earns 1.0, and breaking one reward rule makes it say so."""

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prorl_jax import rewards
from prorl_jax.cli import prepare
from prorl_jax.data import audit, honest
from prorl_jax.rewards import code, code_tests, common
from tests import prepare_test as fixtures

TASKS = "countdown,n_queens,number_sorting,word_sorting,syllogism,letter_counting,word_ladder"


@pytest.fixture(scope="module")
def mix(tmp_path_factory):
  d = tmp_path_factory.mktemp("audit")
  (d / "eurus").mkdir()
  pq.write_table(pa.Table.from_pylist(fixtures._eurus(10)), d / "eurus" / "train-0000.parquet")
  sources = {
    "deepscaler": fixtures._jsonl(d / "ds.jsonl", fixtures._deepscaler(12)),
    "eurus_code": str(d / "eurus"),
    "scp": fixtures._jsonl(d / "scp.jsonl", fixtures._scp(9)),
    "nemotron_if": fixtures._jsonl(d / "if.jsonl", fixtures._nemotron_if(8)),
  }
  out = str(d / "mix")
  argv = ["--mix=prorl", f"--out={out}", "--val=0", "--seed=3", f"--rg_tasks={TASKS}"]
  argv += [f"--source={k}={v}" for k, v in sources.items()]
  argv += ["--count=math=6", "--count=code=6", "--count=stem=4", "--count=logic=21"]
  argv += ["--count=instruction_following=4"]
  assert prepare.main(argv) == 0
  return out


class InProcess:
  """Scores in this process (no isolation), so a test can break a rule with monkeypatch."""

  def score_many(self, jobs):
    return [rewards.safe_score(rewards.route(d), r, ref, **m) for d, r, ref, m in jobs]


@pytest.mark.slow
def test_the_audit_passes_on_the_fixture_mix(mix, tmp_path):
  table = tmp_path / "audit.json"
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "prorl_jax.cli.audit",
      f"--data={mix}",
      "--per_source=2",
      "--attack",
      f"--json={table}",
    ],
    capture_output=True,
    text=True,
    timeout=600,
    cwd=os.path.dirname(os.path.dirname(__file__)),
  )
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
  report = json.loads(table.read_text())
  assert {"deepscaler", "scp", "llama_nemotron_if", "reasoning_gym/countdown"} <= set(report)
  assert any(k in report for k in ("apps", "codecontests", "codeforces", "taco"))
  for key, r in report.items():
    assert r["problems"] == [], key
    if r["reference"] is not None:
      assert r["reference"] == 1.0, key
    for name, st in r["strategies"].items():
      assert st["mean"] <= r["honest_wrong"] and st["failed"] == 0, (key, name, st)
  assert "no strategy or attack earns more than its bar" in proc.stdout
  for key, r in report.items():  # every class of the red team ran on its sources
    assert r["attacks"] and all(a["attack"] <= a["bar"] for a in r["attacks"].values()), key


def test_breaking_one_rule_makes_the_audit_fail(mix, monkeypatch):
  clean = audit.audit(mix, per_source=1, pool=InProcess())
  assert audit.gameable(clean) == []

  def old_tolerance(got, want):  # the tolerance switched on by either token, as it once was
    try:
      a, b = float(got), float(want)
    except ValueError:
      return got == want
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))

  monkeypatch.setattr(common, "same_token", old_tolerance)
  monkeypatch.setattr(code_tests, "same_token", old_tolerance)
  broken = audit.audit(mix, per_source=1, pool=InProcess())
  bad = audit.gameable(broken)
  assert bad and all(any("float_for_int" in p for p in broken[k]["problems"]) for k in bad), broken


def test_a_reference_that_does_not_earn_full_marks_is_reported(mix, monkeypatch):
  from prorl_jax.rewards import math

  monkeypatch.setattr(math, "score", lambda *a, **k: rewards.Score(0.0, "always wrong"))
  report = audit.audit(mix, per_source=1, pool=InProcess())
  assert any("the reference earns 0.00" in p for p in report["deepscaler"]["problems"])


def test_a_verifier_that_pays_everything_fails_the_audit(mix, monkeypatch):
  from prorl_jax.rewards import math

  monkeypatch.setattr(math, "score", lambda *a, **k: rewards.Score(1.0, "mutant: pays all"))
  report = audit.audit(mix, per_source=2, pool=InProcess())
  problems = report["deepscaler"]["problems"]
  assert report["deepscaler"]["reference"] == 1.0 and "deepscaler" in audit.gameable(report)
  assert "an empty answer earns 1.00" in problems, problems
  assert "an honest wrong answer earns 1.00, as much as the reference" in problems, problems
  assert all(not r["problems"] for k, r in report.items() if k != "deepscaler"), report


def test_a_verifier_that_refuses_honest_formats_fails_the_audit(mix, monkeypatch):
  clean = audit.audit(mix, per_source=2, pool=InProcess())
  assert all(r["honest_formats"]["accepted"] in (None, 1.0) for r in clean.values()), clean
  assert clean["deepscaler"]["honest_formats"]["responses"] == 2 * len(honest.MATH_WRAPPERS)
  monkeypatch.setattr(code, "PYTHON_FENCES", ("python",))  # a ```python3 fence refused
  report = audit.audit(mix, per_source=2, pool=InProcess())
  bad = audit.gameable(report)
  assert bad and all(k in ("apps", "codecontests", "codeforces", "taco") for k in bad), bad
  for k in bad:
    (problem,) = report[k]["problems"]
    assert problem.startswith("honest formats earn full credit 33% of the time"), problem
    assert report[k]["honest_formats"]["accepted"] == pytest.approx(1 / 3)


def test_the_audit_passes_on_the_fixture_suite(tmp_path):
  from tests.suite_test import FIXTURES, _write_sources

  out = tmp_path / "suite"
  argv = ["--suite=prorl-eval", f"--out={out}", "--rg_per_task=1", "--nocheck_references"]
  assert prepare.main(argv + _write_sources(tmp_path, FIXTURES)) == 0
  report = audit.audit(str(out), per_source=1, pool=InProcess())
  assert len(report) > 40 and audit.gameable(report) == [], {
    k: r["problems"] for k, r in report.items() if r["problems"]
  }
  assert {"gpqa", "livecodebench", "humanevalplus", "reasoning_gym/boxnet"} <= set(report)
  assert all(r["reference"] in (None, 1.0) for r in report.values())


def test_the_red_team_catches_a_verifier_that_stops_folding_look_alikes(mix, monkeypatch):
  from prorl_jax.rewards import ifeval, instructions, reading

  clean = audit.audit(mix, per_source=1, pool=InProcess(), attack=True)
  assert audit.gameable(clean) == [], {k: r["problems"] for k, r in clean.items()}
  assert clean["llama_nemotron_if"]["attacks"]["lookalike"]["attack"] == 0.0
  # the text read after NFKC alone: Cyrillic letters and fullwidth commas pass for others
  for checks in (ifeval, instructions):
    monkeypatch.setattr(checks, "folded", reading.as_read)
  monkeypatch.setattr(instructions, "commas", lambda t: reading.as_read(t).count(","))
  broken = audit.audit(mix, per_source=1, pool=InProcess(), attack=True)
  assert audit.gameable(broken) == ["llama_nemotron_if"], broken
  lookalike = broken["llama_nemotron_if"]["attacks"]["lookalike"]
  assert lookalike["attack"] > lookalike["bar"], lookalike
  assert any(
    p.startswith("attack lookalike earns") for p in broken["llama_nemotron_if"]["problems"]
  )


def test_the_red_team_exits_1_when_the_one_reading_stops_folding_look_alikes(mix, monkeypatch):
  """Broken inside the one reading itself (every look-alike is its own prototype), not in one
  verifier: the disguised violation must still earn more than its bar, and the command must say
  so with its exit status."""
  import functools

  from prorl_jax.cli import audit as audit_cli
  from prorl_jax.rewards import reading

  monkeypatch.setattr(audit_cli, "audit", functools.partial(audit.audit, pool=InProcess()))
  argv = [f"--data={mix}", "--per_source=1", "--attack"]
  assert audit_cli.main(argv) == 0
  reading.prototype.cache_clear()
  monkeypatch.setattr(reading, "prototype", lambda c: c)
  assert audit_cli.main(argv) == 1
  broken = audit.audit(mix, per_source=1, pool=InProcess(), attack=True)
  lookalike = broken["llama_nemotron_if"]["attacks"]["lookalike"]
  assert lookalike["attack"] > lookalike["bar"], lookalike


def test_a_domain_without_audit_hooks_is_listed_unaudited(mix, monkeypatch, capsys):
  """The demo's chain_sum verifier has no module in `data/domains/`: a source routed to it is
  listed as unaudited (not judged, not a problem); the others are audited as before."""
  from prorl_jax.cli import audit as audit_cli
  from prorl_jax.data import domains
  from prorl_jax.data.domains import mcq

  assert domains.hooks("chain_sum") is None and domains.hooks("stem") is mcq.DOMAIN
  monkeypatch.setitem(rewards.DEFAULT_ROUTING, "deepscaler", "chain_sum")
  report = audit.audit(mix, per_source=2, pool=InProcess())
  assert report["deepscaler"]["unaudited"] == (
    "verifier 'chain_sum' has no audit hooks (its row in prorl_jax/rewards/verifiers.py names "
    "no domain)"
  )
  assert audit.gameable(report) == []
  assert all(r["reference"] == 1.0 for k, r in report.items() if k not in ("deepscaler",)
             and r["reference"] is not None)  # fmt: skip
  monkeypatch.setattr(audit_cli, "audit", lambda *a, **k: report)
  assert audit_cli.main([f"--data={mix}"]) == 0
  out = capsys.readouterr().out
  assert "unaudited: verifier 'chain_sum' has no audit hooks" in out
  assert f"in {len(report) - 1} sources (1 unaudited)" in out
