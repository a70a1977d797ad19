"""The README's real-run block, every command of it, end to end on the CPU: the same commands
in the same order, with a tiny Qwen2 (a byte-level BPE trained here) where they download the
1.5B model, fixture rows in each source's published schema where they download datasets, the JAX
engine where they build vLLM, and a run sized for a CPU (2 steps, short responses).

Each README command must match exactly one rule below, so a command added to the README without
a way to run it here fails this test rather than going untested."""

import json
import os
import re
import shlex
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests import prepare_test as mix_fixtures
from tests import suite_test as suite_fixtures
from tests.readme_test import _commands
from tests.smoke_test import QWEN_STYLE_TEMPLATE, bpe_qwen2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The real run on a CPU: 2 steps of 8 prompts x 4 samples, the JAX engine, in-loop validation on
# the fixture suite at step 0 and at the end.
TRAIN = [
  "--config.total_steps=2",
  "--config.rollout.engine=jax",
  "--config.rollout.n=4",
  "--config.rollout.prompts_per_step=8",
  "--config.rollout.mini_batch_prompts=4",
  "--config.rollout.micro_batch_size=4",
  "--config.rollout.max_prompt_len=1024",
  "--config.rollout.max_response_len=24",
  "--config.rollout.timeout_s=900",
  "--config.eval.every=2",
  "--config.eval.max_prompts=2",
  "--config.checkpoint.every=1",
  # a random model's text earns no reward anywhere: every group would be uninformative
  "--config.algo.dynamic_sampling=false",
]
SUITE_EVAL = [
  "--config=configs/qwen15b.py:smoke",
  "--config.rollout.engine=jax",
  "--max_response_len=16",
  "--samples=math=2",
  "--samples=code=1",
  "--samples=stem=2",
  "--samples=instruction_following=1",
  "--samples=logic=1",
]


def _recipe():
  """The README's real-run block, one simple command a line (`a && b` split)."""
  text = open(os.path.join(ROOT, "README.md")).read()
  block = text[text.index("## The real run: the commands") :]
  block = block[: block.index("```", block.index("```bash") + 7) + 3]
  return [c for line in _commands(block) for c in re.split(r"\s*&&\s*", line)]


def _mix_sources(src):
  (src / "eurus").mkdir(parents=True)
  pq.write_table(pa.Table.from_pylist(mix_fixtures._eurus(8)), src / "eurus" / "train-0000.parquet")
  rows = {
    "deepscaler": mix_fixtures._deepscaler(10),
    "scp": mix_fixtures._scp(6),
    "nemotron_if": mix_fixtures._nemotron_if(6),
  }
  flags = [f"--source={k}={mix_fixtures._jsonl(src / f'{k}.jsonl', v)}" for k, v in rows.items()]
  flags += [f"--source=eurus_code={src / 'eurus'}", "--val=1", "--rg_tasks=basic_arithmetic"]
  flags += [f"--count={d}=4" for d in ("math", "code", "stem", "logic", "instruction_following")]
  return flags, [json.dumps(r) for v in rows.values() for r in v]


@pytest.mark.slow
def test_the_readmes_real_run_block_runs_to_its_last_command(tmp_path):
  work = tmp_path / "work"
  work.mkdir()
  os.symlink(os.path.join(ROOT, "configs"), work / "configs")
  models = str(tmp_path / "models")
  mix_flags, corpus = _mix_sources(tmp_path / "src")
  suite_flags = suite_fixtures._write_sources(tmp_path) + ["--rg_tasks=graph_color"]
  suite_flags += ["--rg_per_task=2"]
  corpus += [json.dumps(r) for v in suite_fixtures.FIXTURES.values() for r in v]
  corpus += [QWEN_STYLE_TEMPLATE] * 3
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", XLA_FLAGS="", HF_HUB_OFFLINE="1")

  def shell(cmd, extra=()):
    words = shlex.split(cmd.replace("/models/", models + "/")) + list(extra)
    words[0] = sys.executable if words[0] == "python" else words[0]
    proc = subprocess.run(words, cwd=work, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr

  rules = [
    (r"make venv-gpu|source \.venv/bin/activate|make venv-vllm", None),  # this .venv; JAX engine
    (r"hf download \S+ --local-dir (\S+)", "model"),
    (r"python -m prorl_jax\.cli\.prepare --mix=prorl .*", mix_flags),
    (r"python -m prorl_jax\.cli\.prepare --suite=prorl-eval .*", suite_flags),
    (r"python -m prorl_jax\.cli\.audit --data=\S+", ["--per_source=2"]),
    (r"python -m prorl_jax\.main --config=configs/qwen15b\.py .*", TRAIN),
    (r"python -m prorl_jax\.cli\.export \S+ \S+", []),
    (r"python -m prorl_jax\.cli\.eval --suite=prorl-eval .*", SUITE_EVAL),
    (r"cat (\S+)", "cat"),
  ]
  recipe = _recipe()
  assert len(recipe) >= 12, recipe
  seen = {}
  for cmd in recipe:
    matched = [(pat, how) for pat, how in rules if re.fullmatch(pat, cmd)]
    assert len(matched) == 1, f"README command with {len(matched)} rules here: {cmd}"
    pat, how = matched[0]
    seen[pat] = seen.get(pat, 0) + 1
    if how is None:
      continue
    if how == "model":  # the download: a tiny Qwen2 with a Qwen-style chat template
      target = re.fullmatch(pat, cmd).group(1).replace("/models/", models + "/")
      assert 300 < bpe_qwen2(target, corpus) <= 400
    elif how == "cat":
      report = (work / re.fullmatch(pat, cmd).group(1)).read_text()
      assert "R1-Distill-1.5B" in report and "ProRL v2" in report, report[:2000]
    else:
      out = shell(cmd, how)
      if "prorl_jax.main" in cmd:
        train_log = out
      if "prorl_jax.cli.eval" in cmd:
        assert "rollouts: the jax engine" in out, out[-2000:]
  unused = {p for p, _ in rules} - set(seen)
  assert not unused, f"rules that no README command used: {unused}"

  run = work / "runs" / "prorl_v2_qwen15b"
  rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
  assert [r["step"] for r in rows if "actor/loss" in r] == [1, 2], train_log[-2000:]
  val = [r for r in rows if any(k.startswith("val/aime24/") for k in r)]
  # in-loop validation on the prepared suite at steps 0 and 2; the last also as the final row
  assert [(r["step"], r["event"]) for r in val] == [
    (0, "validation"),
    (2, "validation"),
    (2, "final"),
  ]
  hf = run / "hf"
  assert (hf / "config.json").is_file() and list(hf.glob("*.safetensors"))
  report = json.loads((work / "eval" / "run" / "report.json").read_text())
  assert set(report["measured_columns"]) == {"R1-Distill-1.5B", "ProRL v2"}
  assert report["model"].endswith("prorl_v2_qwen15b/checkpoints/2"), report["model"]
  assert {"aime24", "gpqa_diamond", "ifeval", "humanevalplus"} <= set(report["benchmarks"])
  for domain in report["domains"].values():  # every benchmark scored, beside both others
    for row in domain["rows"]:
      assert row["ours"] is not None and set(row["measured"]) == set(report["measured_columns"])
