"""`python -m prorl_jax.cli.prepare --mix=prorl`: fixture rows in each source's schema become verl
rows routed to the right verifier, deduplicated, counted, split and checksummed."""

import hashlib
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prorl_jax import rewards
from prorl_jax.cli import prepare
from prorl_jax.data import prompts
from prorl_jax.demo import tiny_base
from prorl_jax.rewards import puzzles

BOX = prepare.BOXED_INSTRUCTION


def _jsonl(path, rows):
  with open(path, "w") as f:
    for r in rows:
      f.write(json.dumps(r) + "\n")
  return str(path)


def _deepscaler(n):
  rows = [
    {"problem": f"What is {i} + {i}?", "answer": str(2 * i), "solution": f"{i} + {i} = {2 * i}"}
    for i in range(n)
  ]
  rows.append({"problem": "WHAT is 0   +\n0?", "answer": "0", "solution": "dup of row 0"})
  rows.append({"problem": "What is nothing?", "answer": "", "solution": ""})
  return rows


def _eurus(n):
  rows = []
  for i in range(n):
    rows.append(
      {
        "data_source": ["codecontests", "apps", "taco", "codeforces"][i % 4],
        "prompt": [
          {"role": "system", "content": "You are a coder."},
          {"role": "user", "content": f"Read two integers and print their sum plus {i}."},
        ],
        "ability": "code",
        "reward_model": {
          "style": "rule",
          "ground_truth": json.dumps(
            {"inputs": ["1 2\n", "5 5\n"], "outputs": [f"{3 + i}\n", f"{10 + i}\n"]}
          ),
        },
        "extra_info": {"split": "train", "index": i},
      }
    )
  rows.append(dict(rows[0], ability="math", prompt=[{"role": "user", "content": "2+2?"}]))
  rows.append(
    dict(
      rows[0],
      prompt=[{"role": "user", "content": "broken tests"}],
      reward_model={"style": "rule", "ground_truth": "{not json"},
    )
  )
  return rows


def _scp(n):
  rows = [
    {
      "domain": "physics",
      "problem": f"A ball falls for {i + 1} s from rest; g=10. How far (m)?",
      "matched_solution": f"d = g t^2 / 2 = \\boxed{{{5 * (i + 1) ** 2}}}",
      "o1_solution": "...",
      "is_o1_solution_same_with_matched_solution": True,
      "qwq_solution": "...",
      "is_qwq_solution_same_with_matched_solution": True,
    }
    for i in range(n)
  ]
  rows.append(
    dict(
      rows[0],
      problem="No final answer here?",
      matched_solution="We discuss falling bodies in general and never reach the distance.",
    )
  )
  return rows


def _nemotron_if(n):
  rows = [
    {
      "input": f"Write {i + 3} short lines about tea. Use no commas and only lowercase.",
      "args": {
        "instruction_id_list": ["punctuation:no_comma", "change_case:english_lowercase"],
        "instruction_kwargs": [{}, {}],  # the RL configuration's key (IFEval's is kwargs)
      },
      "category": "instruction following",
      "license": "cc-by-4.0",
    }
    for i in range(n)
  ]
  rows.append(
    {
      "input": "Answer in French.",
      "args": json.dumps({"instruction_id_list": ["detectable_format:emoji_only"], "kwargs": [{}]}),
    }
  )
  return rows


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
  d = tmp_path_factory.mktemp("src")
  eurus = d / "eurus"
  eurus.mkdir()
  pq.write_table(pa.Table.from_pylist(_eurus(10)), eurus / "train-0000.parquet")
  sources = {
    "deepscaler": _jsonl(d / "ds.jsonl", _deepscaler(12)),
    "eurus_code": str(eurus),
    "scp": _jsonl(d / "scp.jsonl", _scp(9)),
    "nemotron_if": _jsonl(d / "if.jsonl", _nemotron_if(8)),
  }
  out = str(d / "mix")
  argv = [
    "--mix=prorl",
    f"--out={out}",
    "--val=2",
    "--seed=3",
    "--rg_tasks=basic_arithmetic,chain_sum",
  ]
  argv += [f"--source={k}={v}" for k, v in sources.items()]
  argv += [
    "--count=math=8",
    "--count=code=6",
    "--count=stem=5",
    "--count=logic=7",
    "--count=instruction_following=4",
  ]
  assert prepare.main(argv) == 0
  return out, json.load(open(os.path.join(out, "manifest.json")))


def _rows(path):
  return pq.read_table(path).to_pylist()


def test_counts_split_and_manifest(prepared):
  out, m = prepared
  want = {"math": 8, "code": 6, "stem": 5, "logic": 7, "instruction_following": 4}
  assert {d: s["train"] for d, s in m["sources"].items()} == want
  assert all(s["val"] == 2 for s in m["sources"].values())
  assert m["weights"] == [8, 6, 5, 7, 4]
  for rel, meta in m["files"].items():
    path = os.path.join(out, rel)
    assert hashlib.sha256(open(path, "rb").read()).hexdigest() == meta["sha256"]
    assert len(_rows(path)) == meta["rows"]
  assert m["files"]["val.parquet"]["rows"] == 10
  assert m["sources"]["math"]["dataset"] == "agentica-org/DeepScaleR-Preview-Dataset"
  assert m["sources"]["math"]["revision"].startswith("local:")
  assert m["sources"]["stem"]["license"].startswith("CC BY-NC-SA 4.0")
  train_prompts = {
    prepare.normalise_prompt(r["prompt"])
    for rel in m["train_files"]
    for r in _rows(os.path.join(out, rel))
  }
  val_prompts = {
    prepare.normalise_prompt(r["prompt"]) for r in _rows(os.path.join(out, "val.parquet"))
  }
  assert len(train_prompts) == 30 and not train_prompts & val_prompts  # no duplicate, no leak


def test_malformed_rows_are_counted_by_reason(prepared):
  _, m = prepared
  assert m["sources"]["math"]["malformed"] == {"column 'answer' is empty": 1}
  assert m["sources"]["math"]["duplicates"] == 1  # case- and space-folded duplicate of row 0
  assert m["sources"]["code"]["malformed"] == {
    "column 'ability' is not code": 1,
    "column 'reward_model.ground_truth' (test cases) is not JSON": 1,
  }
  assert m["sources"]["stem"]["malformed"] == {
    "column 'matched_solution' has no final answer (no \\boxed{}, 'the answer is', final "
    "'= value' or short last line)": 1
  }
  assert m["sources"]["stem"]["answer_from"] == {"boxed": 9}
  assert m["sources"]["instruction_following"]["malformed"] == {
    "column 'args.instruction_id_list': unsupported instruction detectable_format:emoji_only": 1
  }


def test_every_row_routes_to_its_verifier_and_a_correct_answer_scores_1(prepared):
  out, m = prepared
  train, weights, val = prompts.prepared_files(out)
  assert weights == [8.0, 6.0, 5.0, 7.0, 4.0] and val == [os.path.join(out, "val.parquet")]
  want = {
    "math": "math",
    "code": "code",
    "stem": "stem",
    "logic": "reasoning_gym",
    "instruction_following": "ifeval",
  }
  for path, (domain, verifier) in zip(train, want.items()):
    rows = _rows(path)
    for i, row in enumerate(rows):
      parsed = prompts.parse_row(row, path, i)
      assert rewards.verifier_name(parsed["data_source"]) == verifier
      assert parsed["extra"]["domain"] == domain
    r = prompts.parse_row(rows[0], path, 0)
    ref, extra = r["reference"], r["extra"]
    if verifier in ("math", "stem"):
      response = f"<think>ok</think> \\boxed{{{ref}}}"
      wrong = f"<think>ok</think> \\boxed{{{ref}1}}"
      assert BOX in r["messages"][-1]["content"]
    elif verifier == "code":
      tests = json.loads(ref)
      bonus = int(tests["outputs"][0]) - 3
      response = (
        "```python\nimport sys\na, b = map(int, sys.stdin.read().split())\n"
        f"print(a + b + {bonus})\n```"
      )
      wrong = response.replace(f"+ {bonus})", f"+ {bonus + 1})")
    elif verifier == "reasoning_gym":
      entry = puzzles.dataset(extra["task"], extra["seed"], extra["size"])[extra["index"]]
      response = f"<think>ok</think><answer>{entry['answer']}</answer>"
      wrong = f"<think>ok</think><answer>{entry['answer']}1</answer>"
    else:
      response = "<think>ok</think>tea is warm\ntea is calm\ntea is good"
      wrong = "<think>ok</think>tea"  # not substantive: no instruction counts
    s = rewards.route(r["data_source"])(response, ref, **extra)
    assert s.value == 1.0 and not s.failed, (domain, s)
    # a verifier that pays everything fails here: a wrong answer beside the right one earns 0
    w = rewards.route(r["data_source"])(wrong, ref, **extra)
    assert w.value == 0.0 and not w.failed, (domain, w)


def test_prepared_files_load_through_the_trainers_reader(prepared, tmp_path):
  from prorl_jax.model import load_tokenizer

  out, _ = prepared
  tok = load_tokenizer(tiny_base.build(str(tmp_path / "base")))
  train, weights, val = prompts.prepared_files(out)
  blend, items = prompts.make_sources(
    tok,
    train_files=train,
    val_files=val,
    weights=weights,
    max_prompt_len=100_000,
    seed=0,
    heldout=1,
  )
  assert blend.verifiers == {"math", "code", "stem", "reasoning_gym", "ifeval"}
  assert len(items) == 10


def test_a_missing_column_stops_with_one_line(tmp_path, capsys):
  bad = _jsonl(tmp_path / "ds.jsonl", [{"problem": "1+1?", "solution": "2"}])
  rc = prepare.main(
    [
      "--mix=prorl",
      f"--out={tmp_path}/o",
      f"--source=deepscaler={bad}",
      "--count=code=0",
      "--count=stem=0",
      "--count=logic=0",
      "--count=instruction_following=0",
    ]
  )
  err = capsys.readouterr().err.strip()
  assert rc == 2 and "\n" not in err
  assert err.startswith("error: agentica-org/DeepScaleR-Preview-Dataset@local:")
  assert "none of its 1 rows converts (1 with missing column 'answer')" in err
  assert "deepscaler rows need the columns problem, answer" in err
  assert "--revision deepscaler=SHA" in err


@pytest.mark.parametrize(
  "argv,msg",
  [
    (["--source=nope=/x"], "--source nope: unknown source"),
    (["--count=poetry=5"], "--count poetry=5: want DOMAIN=N"),
    (["--source=deepscaler"], "--source takes NAME=VALUE"),
    (
      [
        "--source=deepscaler=/no/such/file.jsonl",
        "--count=code=0",
        "--count=stem=0",
        "--count=logic=0",
        "--count=instruction_following=0",
      ],
      "/no/such/file.jsonl: no such file",
    ),
  ],
)
def test_flag_errors_are_one_line(tmp_path, capsys, argv, msg):
  assert prepare.main(["--mix=prorl", f"--out={tmp_path}/o"] + argv) == 2
  err = capsys.readouterr().err.strip()
  assert msg in err and "\n" not in err


def test_ifeval_ids_map_to_the_verifiers_checks():
  got = prepare.ifeval_instructions(
    ["length_constraints:number_words", "keywords:forbidden_words"],
    [{"relation": "at least", "num_words": 5}, {"forbidden_words": ["tea"]}],
  )
  assert got == [
    {"type": "words", "relation": "at least", "num": 5},
    {"type": "keywords_exclude", "keywords": ["tea"]},
  ]
  from prorl_jax.rewards import ifeval

  assert ifeval.score("rain fell on the roof", None, instructions=got).value == 1.0
  assert ifeval.score("tea time", None, instructions=got).value == 0.0
  with pytest.raises(prepare.Malformed, match="lacks num_words"):
    prepare.ifeval_instructions(["length_constraints:number_words"], [{"relation": "at least"}])


IFEVAL_25 = (
  "keywords:existence",
  "keywords:frequency",
  "keywords:forbidden_words",
  "keywords:letter_frequency",
  "language:response_language",
  "length_constraints:number_sentences",
  "length_constraints:number_paragraphs",
  "length_constraints:number_words",
  "length_constraints:nth_paragraph_first_word",
  "detectable_content:number_placeholders",
  "detectable_content:postscript",
  "detectable_format:number_bullet_lists",
  "detectable_format:constrained_response",
  "detectable_format:number_highlighted_sections",
  "detectable_format:multiple_sections",
  "detectable_format:json_format",
  "detectable_format:title",
  "combination:two_responses",
  "combination:repeat_prompt",
  "startend:end_checker",
  "change_case:capital_word_frequency",
  "change_case:english_capital",
  "change_case:english_lowercase",
  "punctuation:no_comma",
  "startend:quotation",
)


def test_every_ifeval_instruction_type_is_supported():
  from prorl_jax.data.ifeval_ids import IFEVAL_IDS

  assert set(IFEVAL_IDS) == set(IFEVAL_25)


@pytest.mark.parametrize(
  "iid,kwargs,good,bad",
  [
    (
      "language:response_language",
      {"language": "fr"},
      "Je pense que la réponse est simple et je vais l'expliquer en français.",
      "I think the answer is simple and I will explain it in English.",
    ),
    (
      "length_constraints:number_paragraphs",
      {"num_paragraphs": 3},
      "one part here\n***\ntwo more words\n***\nthree at last",
      "one part here\n***\n\n***\nthree at last",
    ),
    (
      "length_constraints:nth_paragraph_first_word",
      {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "tea"},
      'Coffee is fine.\n\n"Tea, however, is better.',
      "Coffee is fine.\n\nWater is better.",
    ),
    (
      "detectable_format:constrained_response",
      {},
      "Thinking... My answer is maybe.",
      "My answer is probably.",
    ),
    (
      "detectable_format:number_highlighted_sections",
      {"num_highlights": 2},
      "a *first* and **second** part",
      "only *one* here",
    ),
    (
      "combination:two_responses",
      {},
      "the first answer\n******\nthe second answer",
      "the same answer\n******\nthe same answer",
    ),
    (
      "combination:repeat_prompt",
      {"prompt_to_repeat": "Write a poem."},
      "write a poem. Roses are red and violets are blue.",
      "A poem: roses are red and violets are blue.",
    ),
  ],
)
def test_the_ifeval_checks_by_example(iid, kwargs, good, bad):
  from prorl_jax.rewards import ifeval

  ins = prepare.ifeval_instructions([iid], [dict(kwargs, unused=None)])
  assert ifeval.score(good, None, instructions=ins).value == 1.0
  assert ifeval.score(bad, None, instructions=ins).value == 0.0
