"""`prepare --suite=prorl-eval`: fixture rows in each benchmark's published schema become
verl rows routed to the right verifier; malformed rows are counted by reason."""

import base64
import json
import os
import pickle
import zlib

import pytest

from prorl_jax import rewards, sandbox
from prorl_jax.cli import prepare
from prorl_jax.data import suite, suite_rows
from prorl_jax.data.prompts import parse_row

HEP_TEST = """
import numpy as np

def assertion(out, exp, atol):
    assert out == exp

def check(candidate):
    inputs = [[[1, 2, 3]], [[]], [[-4, 4]]]
    results = [6, 0, 0]
    for i, (inp, exp) in enumerate(zip(inputs, results)):
        assertion(candidate(*inp), exp, 0)
"""
HEP_PROMPT = 'from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    """Sum of xs."""\n'


def _lcb_private(cases) -> str:
  return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


FIXTURES = {
  "aime24": [
    {"id": 60, "problem": "Find 2+2.", "solution": "4", "answer": "4", "url": "u", "year": "2024"}
  ],
  "aime25": [{"problem": "Find 3+4.", "answer": "7", "id": "0"}],
  "amc": [
    {"id": 0, "problem": "Find 100+42.", "answer": 142.0, "url": "u"},
    {"id": 1, "problem": "Empty.", "answer": None, "url": "u"},
  ],
  "math500": [
    {
      "problem": "Half of one?",
      "solution": "s",
      "answer": "\\frac{1}{2}",
      "subject": "Algebra",
      "level": 1,
      "unique_id": "test/a.json",
    }
  ],
  "minerva": [{"question": "Speed of light in m/s, 1 sig fig?", "answer": "3e8"}],
  "olympiadbench": [
    {
      "id": 1,
      "question": "Smallest prime?",
      "final_answer": ["$2$"],
      "is_multiple_answer": False,
      "unit": None,
      "subfield": "NT",
    }
  ],
  "prime_val": [
    {
      "data_source": ds,
      "ability": "code",
      "prompt": [{"role": "user", "content": f"{ds} task"}],
      "reward_model": {
        "style": "rule",
        "ground_truth": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]}),
      },
      "extra_info": {},
    }
    for ds in ("apps", "codecontests", "codeforces", "taco")
  ]
  + [
    {
      "data_source": "numina_olympiads",
      "ability": "math",
      "prompt": [{"role": "user", "content": "m"}],
      "reward_model": {"style": "rule", "ground_truth": "1"},
      "extra_info": {},
    }
  ],
  "humanevalplus": [
    {
      "task_id": "HumanEval/0",
      "prompt": HEP_PROMPT,
      "canonical_solution": "",
      "entry_point": "total",
      "test": HEP_TEST,
    },
    {
      "task_id": "HumanEval/1",
      "prompt": "def f(x):\n",
      "canonical_solution": "",
      "entry_point": "f",
      "test": "def check(candidate):\n    assert candidate(1) == 2\n",
    },
  ],
  "livecodebench": [
    {
      "question_title": "t",
      "question_content": "Return a+b.",
      "platform": "leetcode",
      "question_id": "1",
      "contest_id": "c",
      "contest_date": "2024-09-01T00:00:00",
      "starter_code": "class Solution:\n    def add(self, a: int, b: int) -> int:\n",
      "difficulty": "easy",
      "public_test_cases": json.dumps([{"input": "1\n2", "output": "3", "testtype": "functional"}]),
      "private_test_cases": _lcb_private(
        [{"input": "5\n-5", "output": "0", "testtype": "functional"}]
      ),
      "metadata": json.dumps({"func_name": "add"}),
    },
    {
      "question_title": "s",
      "question_content": "Reverse a line.",
      "platform": "atcoder",
      "question_id": "2",
      "contest_id": "c",
      "contest_date": "2024-12-31T00:00:00",
      "starter_code": "",
      "difficulty": "easy",
      "public_test_cases": json.dumps([{"input": "ab\n", "output": "ba\n", "testtype": "stdin"}]),
      "private_test_cases": json.dumps(
        [{"input": "xyz\n", "output": "zyx\n", "testtype": "stdin"}]
      ),
      "metadata": "{}",
    },
    {
      "question_title": "old",
      "question_content": "Too old.",
      "platform": "atcoder",
      "question_id": "3",
      "contest_id": "c",
      "contest_date": "2023-05-01T00:00:00",
      "starter_code": "",
      "difficulty": "easy",
      "public_test_cases": "[]",
      "private_test_cases": "[]",
      "metadata": "{}",
    },
    {
      "question_title": "evil",
      "question_content": "Hostile pickle.",
      "platform": "atcoder",
      "question_id": "4",
      "contest_id": "c",
      "contest_date": "2024-10-01T00:00:00",
      "starter_code": "",
      "difficulty": "easy",
      "public_test_cases": "[]",
      "private_test_cases": base64.b64encode(
        zlib.compress(b"cos\nsystem\n(S'echo pwned'\ntR.")
      ).decode(),
      "metadata": "{}",
    },
  ],
  "gpqa_diamond": [
    {
      "Question": f"Which is right #{i}?",
      "Correct Answer": "right",
      "Incorrect Answer 1": "w1",
      "Incorrect Answer 2": "w2",
      "Incorrect Answer 3": "w3",
    }
    for i in range(4)
  ],
  "ifeval": [
    {
      "key": 1,
      "prompt": "Write a story without commas.",
      "instruction_id_list": ["punctuation:no_comma"],
      "kwargs": [{}],
    },
    {
      "key": 2,
      "prompt": "Answer in French.",
      "instruction_id_list": ["detectable_format:emoji_only"],
      "kwargs": [{}],
    },
  ],
}


def _write_sources(tmp_path, fixtures=FIXTURES) -> list[str]:
  args = []
  for name, rows in fixtures.items():
    path = tmp_path / "src" / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args += ["--source", f"{name}={path}"]
  return args


def _rows(path) -> list[dict]:
  import pyarrow.parquet as pq

  return [parse_row(r, str(path), i) for i, r in enumerate(pq.read_table(path).to_pylist(), 1)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("suite")
  out = tmp / "eval"
  rc = prepare.main(
    ["--suite=prorl-eval", f"--out={out}", "--rg_per_task=2", "--rg_tasks=basic_arithmetic"]
    + _write_sources(tmp)
  )
  assert rc == 0
  return out, json.loads((out / "manifest.json").read_text())


def test_every_benchmark_has_its_file_rows_and_verifier(built):
  out, m = built
  assert set(m["benchmarks"]) == set(suite.BENCHMARKS)
  want_rows = {
    "aime24": 1,
    "aime25": 1,
    "amc": 1,
    "math500": 1,
    "minerva": 1,
    "olympiadbench": 1,
    "apps": 1,
    "codecontests": 1,
    "codeforces": 1,
    "taco": 1,
    "humanevalplus": 1,
    "livecodebench": 2,
    "gpqa_diamond": 4,
    "ifeval": 1,
    "reasoning_gym": 2,
    "reasoning_gym_ood": 6,
  }
  verifier = {
    "math": "math",
    "code": "code",
    "stem": "stem",
    "instruction_following": "ifeval",
    "logic": "reasoning_gym",
  }
  for name, b in m["benchmarks"].items():
    rows = _rows(out / b["file"])
    assert len(rows) == want_rows[name] == b["rows"], name
    for r in rows:
      assert r["extra"]["benchmark"] == name
      assert rewards.verifier_name(r["data_source"]) == verifier[b["domain"]], name
  import hashlib

  for rel, f in m["files"].items():
    assert hashlib.sha256((out / rel).read_bytes()).hexdigest() == f["sha256"]


def test_references_are_normalised(built):
  out, _ = built
  ref = {
    n: _rows(out / f"{n}.parquet")[0]["reference"]
    for n in ("aime24", "amc", "math500", "minerva", "olympiadbench")
  }
  assert ref == {
    "aime24": "4",
    "amc": "142",
    "math500": "\\frac{1}{2}",
    "minerva": "3e8",
    "olympiadbench": "2",
  }


def test_malformed_rows_are_counted_by_reason(built):
  _, m = built
  src = m["sources"]
  assert src["amc"]["malformed"] == {"missing column 'answer'": 1}
  assert src["humanevalplus"]["malformed"] == {
    "column 'test' is not a literal inputs/results table": 1
  }
  assert src["ifeval"]["malformed"] == {
    "column 'instruction_id_list': unsupported instruction detectable_format:emoji_only": 1
  }
  lcb = src["livecodebench"]["malformed"]
  assert lcb == {
    "column 'contest_date' outside [2024-08-01, 2025-02-01)": 1,
    "column 'private_test_cases' holds a pickled GLOBAL, not text": 1,
  }
  assert src["prime_val"]["malformed"] == {"column 'ability' is not code": 1}
  assert src["livecodebench"]["window"] == ["2024-08-01", "2025-02-01"]


def test_gpqa_key_points_at_the_correct_choice(built):
  out, _ = built
  keys = set()
  for r in _rows(out / "gpqa_diamond.parquet"):
    text = r["messages"][0]["content"]
    line = [ln for ln in text.splitlines() if ln.startswith(f"{r['reference']}) ")]
    assert line == [f"{r['reference']}) right"]
    keys.add(r["reference"])
    ok = rewards.route("gpqa")(f"so \\boxed{{{r['reference']}}}", r["reference"])
    assert ok.value == 1.0
  assert len(keys) > 1  # shuffled per question, not always A


def test_private_tests_decoder_refuses_anything_but_text():
  cases = [{"input": "1", "output": "2"}]
  assert suite_rows.lcb_tests(_lcb_private(cases)) == cases
  assert suite_rows.lcb_tests(json.dumps(cases)) == cases
  for evil in (pickle.dumps(("a", "b")), pickle.dumps(print), b"garbage"):
    with pytest.raises(prepare.Malformed):
      suite_rows.lcb_tests(base64.b64encode(zlib.compress(evil)).decode())


@pytest.mark.skipif(sandbox.check() is not None, reason="needs the bubblewrap sandbox")
def test_converted_code_tests_score_real_programs(built):
  out, _ = built
  code = rewards.route("humanevalplus")
  hep = _rows(out / "humanevalplus.parquet")[0]
  right = "```python\ndef total(xs: List[int]) -> int:\n    return sum(xs)\n```"
  wrong = "```python\ndef total(xs: List[int]) -> int:\n    return len(xs)\n```"
  assert code(right, hep["reference"], **hep["extra"]).value == 1.0
  # `return 0` passes two tests of three; `len` passes one: nothing beyond a constant program
  assert code(wrong, hep["reference"], **hep["extra"]).value == 0.0
  assert rewards.code.constant_passes(json.loads(hep["reference"])) == (2, "return 0")
  fn_row, io_row = _rows(out / "livecodebench.parquet")
  sol = (
    "```python\nclass Solution:\n    def add(self, a: int, b: int) -> int:\n"
    "        return a + b\n```"
  )
  assert code(sol, fn_row["reference"], **fn_row["extra"]).value == 1.0
  reverse = "```python\nprint(input()[::-1])\n```"
  assert code(reverse, io_row["reference"], **io_row["extra"]).value == 1.0
  echo = "```python\nprint(input())\n```"
  assert code(echo, io_row["reference"], **io_row["extra"]).value == 0.0
  assert json.loads(fn_row["reference"])["inputs"] == [[1, 2], [5, -5]]


def test_missing_column_stops_with_one_line(tmp_path, capsys):
  bad = {"gpqa_diamond": [{"Question": "q", "Correct Answer": "a"}]}
  rc = prepare.main(
    ["--suite=prorl-eval", f"--out={tmp_path / 'o'}", "--benchmarks=gpqa_diamond"]
    + _write_sources(tmp_path, bad)
  )
  err = capsys.readouterr().err.strip()
  assert rc == 2 and len(err.splitlines()) == 1
  assert "Idavidrein/gpqa" in err and "'Incorrect Answer 1'" in err and "local:" in err


def test_unknown_benchmark_and_bad_dates_are_one_line_errors(tmp_path, capsys):
  assert prepare.main(["--suite=prorl-eval", f"--out={tmp_path}", "--benchmarks=aime26"]) == 2
  assert "aime26: unknown" in capsys.readouterr().err
  assert prepare.main(["--suite=prorl-eval", f"--out={tmp_path}", "--lcb_from=2024/08/01"]) == 2
  assert "YYYY-MM-DD" in capsys.readouterr().err
  assert not os.path.exists(tmp_path / "manifest.json")


def test_validation_blend_takes_benchmarks_tasks_and_a_seeded_cap(built, tmp_path):
  from prorl_jax import config as config_lib
  from prorl_jax.data.prompts import DataError
  from prorl_jax.data.sources import sources_for
  from prorl_jax.demo import tiny_base
  from prorl_jax.trainer.plan import data_spec

  out, _ = built
  tok = tiny_base.build_tokenizer(str(tmp_path / "tok"))
  items, verifiers = suite.validation_items(
    tok,
    str(out),
    ["aime24", "gpqa_diamond", "reasoning_gym_ood/boxnet"],
    max_prompts=3,
    max_prompt_len=4096,
    seed=0,
  )
  by = {}
  for it in items:
    by.setdefault(it.extra["benchmark"], []).append(it)
  assert {k: len(v) for k, v in by.items()} == {
    "aime24": 1,
    "gpqa_diamond": 3,
    "reasoning_gym_ood/boxnet": 2,
  }
  assert {it.extra["task"] for it in by["reasoning_gym_ood/boxnet"]} == {"boxnet"}
  assert verifiers == {"math", "stem", "reasoning_gym"}
  again, _ = suite.validation_items(
    tok, str(out), ["gpqa_diamond"], max_prompts=3, max_prompt_len=4096, seed=0
  )
  assert [it.uid for it in again] == [it.uid for it in by["gpqa_diamond"]]
  with pytest.raises(DataError, match="'aime26' is not in"):
    suite.validation_items(tok, str(out), ["aime26"], max_prompts=0, max_prompt_len=4096, seed=0)
  with pytest.raises(DataError, match="'reasoning_gym/nope' has no prompts"):
    suite.validation_items(
      tok, str(out), ["reasoning_gym/nope"], max_prompts=0, max_prompt_len=4096, seed=0
    )
  # the trainer's held-out set is the blend, and the run knows it needs the code sandbox
  cfg = config_lib.base_config()
  cfg.data.train_files = str(out / "aime24.parquet")
  cfg.data.val_suite, cfg.data.val_benchmarks = str(out), "aime24,apps"
  cfg.rollout.max_prompt_len = 4096
  blend, heldout = sources_for(data_spec(cfg), tok)
  assert sorted({it.extra["benchmark"] for it in heldout}) == ["aime24", "apps"]
  assert "code" in blend.verifiers
  cfg.data.val_benchmarks = ""
  with pytest.raises(config_lib.ConfigError, match="go together"):
    config_lib.validate(cfg)
