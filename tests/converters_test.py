"""Every source of the mix and the suite converts its real layout row by row: a row missing or
mistyping a column is counted under a reason that names the column, wherever it stands in the
file, and the rows around it survive."""

import json

import pytest

from prorl_jax.cli import prepare
from prorl_jax.data import suite
from prorl_jax.data.hub import load_source
from tests import prepare_test as mix_fixtures
from tests.suite_test import FIXTURES

GOOD = {
  "deepscaler": mix_fixtures._deepscaler(2)[0],
  "eurus_code": mix_fixtures._eurus(2)[0],
  "scp": mix_fixtures._scp(2)[0],
  "nemotron_if": mix_fixtures._nemotron_if(2)[0],
  **{name: rows[0] for name, rows in FIXTURES.items()},
}
SOURCES = {**prepare.SOURCES, **suite.SOURCES}
CASES = [(name, col) for name, src in SOURCES.items() for col in src.columns]


def _load(tmp_path, name, rows):
  path = tmp_path / f"{name}.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  return load_source(SOURCES[name], {name: str(path)}, {})


def test_every_source_has_a_good_fixture_row(tmp_path):
  for name in SOURCES:
    rows, bad, _ = _load(tmp_path, name, [GOOD[name]])
    assert len(rows) == 1 and not bad, (name, bad)


@pytest.mark.parametrize("name,column", CASES, ids=[f"{n}-{c}" for n, c in CASES])
def test_a_row_missing_a_column_is_counted_by_name_wherever_it_stands(tmp_path, name, column):
  good = GOOD[name]
  missing = {k: v for k, v in good.items() if k != column}
  rows, bad, info = _load(tmp_path, name, [missing, good, good, missing, good, missing])
  assert len(rows) == 3 and info["rows_read"] == 6
  assert dict(bad) == {f"missing column {column!r}": 3}


WRONG = (12345, {"a": 1}, ["x"], "")
MISTYPED = [
  (n, c, w)
  for n, c in CASES
  for w in WRONG
  if isinstance(w, str) or not isinstance(GOOD[n][c], type(w))  # another type than the layout's
]


@pytest.mark.parametrize(
  "name,column,wrong", MISTYPED, ids=[f"{n}-{c}-{type(w).__name__}" for n, c, w in MISTYPED]
)
def test_a_row_mistyping_a_column_is_counted_naming_it(tmp_path, name, column, wrong):
  good = GOOD[name]
  bad_row = dict(good, **{column: wrong})
  rows, bad, _ = _load(tmp_path, name, [bad_row, good, bad_row])
  if not bad:  # tolerated (e.g. a free-text column that may hold anything)
    assert len(rows) == 3
    return
  assert len(rows) == 1 and sum(bad.values()) == 2
  (reason,) = bad
  assert repr(column) in reason or f"'{column}." in reason, (name, column, reason)


def test_nemotron_rows_keep_their_arguments_under_instruction_kwargs(tmp_path):
  row = {
    "input": "Write about tea in at least 12 words.",
    "args": {
      "instruction_id_list": ["length_constraints:number_words"],
      "instruction_kwargs": [{"relation": "at least", "num_words": 12}],
    },
  }
  rows, bad, _ = _load(tmp_path, "nemotron_if", [row])
  assert not bad and rows[0]["extra_info"]["instructions"] == [
    {"type": "words", "relation": "at least", "num": 12}
  ]
  lacking = {"input": "x y", "args": {"instruction_id_list": ["punctuation:no_comma"]}}
  _, bad, _ = _load(tmp_path, "nemotron_if", [lacking, row])
  assert dict(bad) == {"column 'args' lacks 'instruction_kwargs'": 1}


def test_ifeval_items_without_their_arguments_are_refused(tmp_path):
  good = FIXTURES["ifeval"][0]
  no_kwargs = dict(good, kwargs="not a list")
  _, bad, _ = _load(tmp_path, "ifeval", [no_kwargs, good])
  (reason,) = bad
  assert reason.startswith("column 'kwargs': the instructions' arguments are missing")


@pytest.mark.parametrize(
  "solution,answer,method",
  [
    ("so d = \\boxed{45} m", "45", "boxed"),
    ("Thus the answer is 3.5 m/s.", "3.5 m/s", "answer_is"),
    ("Final answer: $2\\pi$", "2\\pi", "answer_is"),
    ("Energy conservation gives\nv = \\sqrt{2gh} = 14 m/s", "14 m/s", "final_equals"),
    ("A long derivation.\n\nTherefore, 1.2 eV", "1.2 eV", "final_line"),
    # a solution that ends in a display equation: its last row states the answer
    ("Work.\n\\[ v = \\frac{d}{t} = 3.2 \\text{ m/s} \\]", "3.2 \\text{ m/s}", "final_equals"),
    ("Work.\n\\[\nv = \\frac{d}{t} = 3.2 \\text{ m/s}\n\\]\n", "3.2 \\text{ m/s}", "final_equals"),
    ("Work.\n$$\nv = 3.2 \\text{ m/s}.\n$$", "3.2 \\text{ m/s}", "final_equals"),
    (
      "Work.\n\\[\n\\begin{aligned}\nv &= \\frac{d}{t} \\\\\n"
      "&= 3.2 \\text{ m/s}\n\\end{aligned}\n\\]",
      "3.2 \\text{ m/s}",
      "final_equals",
    ),
    ("W \\[ a = 1 \\] then \\[ b = 2 \\text{ m} \\]", "2 \\text{ m}", "final_equals"),
    ("The speed is\n\\[ 3.2 \\text{ m/s} \\].", "3.2 \\text{ m/s}", "final_line"),
  ],
)
def test_scp_answers_are_found_by_the_documented_rules(solution, answer, method):
  assert prepare.scp_answer(solution) == (answer, method)


def test_scp_rows_without_a_final_answer_are_counted(tmp_path):
  good = GOOD["scp"]
  vague = dict(good, matched_solution="We discuss the idea in general terms and stop there.")
  rows, bad, _ = _load(tmp_path, "scp", [vague, good, vague])
  assert len(rows) == 1 and rows[0]["extra_info"]["answer_from"] == "boxed"
  (reason,) = bad
  assert reason.startswith("column 'matched_solution' has no final answer") and bad[reason] == 2


def test_prepare_output_reads_as_verl_reads_it(tmp_path):
  """verl's RLHFDataset: pyarrow rows as dicts, `extra_info.get("index")`, `reward_model`'s
  ground truth a mapping's entry."""
  import pyarrow.parquet as pq

  from prorl_jax.data import prompts

  out = tmp_path / "mix"
  argv = ["--mix=prorl", f"--out={out}", "--val=1", "--rg_tasks=chain_sum,syllogism"]
  argv += ["--count=math=0", "--count=code=0", "--count=stem=0", "--count=instruction_following=0"]
  assert prepare.main(argv + ["--count=logic=4"]) == 0
  for path in [out / "train" / "logic.parquet", out / "val.parquet"]:
    for i, row in enumerate(pq.read_table(path).to_pylist()):
      assert isinstance(row["extra_info"], dict) and isinstance(row["reward_model"], dict)
      assert row["extra_info"].get("index") is not None
      assert isinstance(row["reward_model"]["ground_truth"], str)
      parsed = prompts.parse_row(row, str(path), i)  # and prorl_jax reads it back
      assert None not in parsed["extra"].values()


def test_a_short_domain_is_loud(tmp_path, capsys):
  src = tmp_path / "ds.jsonl"
  src.write_text("".join(json.dumps(r) + "\n" for r in mix_fixtures._deepscaler(3)))
  argv = ["--mix=prorl", f"--out={tmp_path}/o", "--val=0", f"--source=deepscaler={src}"]
  argv += ["--count=code=0", "--count=stem=0", "--count=logic=0", "--count=instruction_following=0"]
  argv += ["--count=math=10"]
  assert prepare.main(argv) == 3
  err = capsys.readouterr().err
  assert "error: math is short by 7 of 10 rows" in err and "column 'answer' is empty" in err
  assert prepare.main(argv + ["--allow_short"]) == 0
  assert "warning: math is short by 7 of 10 rows" in capsys.readouterr().err


def test_rows_whose_reference_cannot_earn_reward_are_dropped_and_counted(tmp_path):
  ds = mix_fixtures._deepscaler(4)[:4]
  ds.append({"problem": "Unbalanced?", "answer": "\\frac{1}{2", "solution": ""})
  eurus = mix_fixtures._eurus(3)[:3]
  clash = json.dumps({"inputs": ["1 2\n", "1 2\n"], "outputs": ["3\n", "4\n"]})  # same input
  eurus.append(
    dict(
      eurus[0],
      prompt=[{"role": "user", "content": "clash"}],
      reward_model={"style": "rule", "ground_truth": clash},
    )
  )
  files = {}
  for name, rows in (("deepscaler", ds), ("eurus_code", eurus)):
    files[name] = tmp_path / f"{name}.jsonl"
    files[name].write_text("".join(json.dumps(r) + "\n" for r in rows))
  argv = ["--mix=prorl", f"--out={tmp_path}/o", "--val=0", "--allow_short"]
  argv += [f"--source={k}={v}" for k, v in files.items()]
  argv += ["--count=math=5", "--count=code=4", "--count=stem=0", "--count=logic=0"]
  assert prepare.main(argv + ["--count=instruction_following=0"]) == 0
  m = json.loads((tmp_path / "o" / "manifest.json").read_text())
  math, code = m["sources"]["math"], m["sources"]["code"]
  assert math["train"] == 4 and math["reference_check"]["dropped"] == {"reference scores 0.0": 1}
  assert code["train"] == 3 and code["reference_check"]["dropped"] == {"reference scores 0.5": 1}
  assert math["reference_check"]["checked"] == 5 and code["reference_check"]["checked"] == 4
  skipped = ["--nocheck_references", f"--out={tmp_path}/p"]
  assert prepare.main(argv + ["--count=instruction_following=0"] + skipped) == 0
  m = json.loads((tmp_path / "p" / "manifest.json").read_text())
  assert m["sources"]["math"]["reference_check"] == "skipped" and m["sources"]["math"]["train"] == 5


def test_code_rows_whose_tests_are_only_the_statements_examples_are_counted(tmp_path):
  good = mix_fixtures._eurus(1)[0]
  shown = (
    "Read two integers and print their sum.\nInput:\n1 2\nOutput:\n3\nInput:\n5 5\nOutput:\n10"
  )
  tests = {"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]}
  lookup = dict(
    good,
    prompt=[{"role": "user", "content": shown}],
    reward_model={"style": "rule", "ground_truth": json.dumps(tests)},
  )
  rows, bad, _ = _load(tmp_path, "eurus_code", [lookup, good])
  assert len(rows) == 1
  ((reason, n),) = bad.items()
  assert n == 1 and reason.startswith("column 'reward_model.ground_truth': every test passes")
  assert "a lookup of the statement's 2 examples" in reason


@pytest.mark.parametrize(
  "content, public, private, why",
  [
    # every test is an example the statement shows: a lookup of them passes
    ("Return a+b.\nExample 1:\nInput: a = 1, b = 2\nOutput: 3",
     [{"input": "1\n2", "output": "3", "testtype": "functional"}], [],
     "a lookup of the statement's 1 examples"),
    # every test expects 0: `return 0` passes them
    ("Return a-a.", [{"input": "1\n1", "output": "0", "testtype": "functional"}],
     [{"input": "5\n5", "output": "0", "testtype": "functional"}], "`return 0`"),
  ],
  ids=["examples-only", "constant"],
)  # fmt: skip
def test_suite_code_rows_a_program_that_solves_nothing_passes_are_counted(
  tmp_path, content, public, private, why
):
  good = FIXTURES["livecodebench"][0]
  row = dict(
    good,
    question_content=content,
    public_test_cases=json.dumps(public),
    private_test_cases=json.dumps(private),
  )
  rows, bad, _ = _load(tmp_path, "livecodebench", [row, good])
  assert len(rows) == 1
  ((reason, n),) = bad.items()
  assert n == 1 and "solves nothing" in reason and why in reason, reason
