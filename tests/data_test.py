"""Prompt sources: verl-schema rows, errors naming file and row, cursors, blends."""

import json

import pytest

from prorl_jax.data import prompts
from prorl_jax.demo import chain_sum, tiny_base
from prorl_jax.model import load_tokenizer


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
  return load_tokenizer(tiny_base.build(str(tmp_path_factory.mktemp("t") / "base")))


def _write(path, rows):
  with open(path, "w") as f:
    for r in rows:
      f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
  return str(path)


def _row(i, src="chain_sum", n=3):
  return {
    "prompt": [{"role": "user", "content": "+".join(["1"] * n) + "="}],
    "data_source": src,
    "reward_model": {"ground_truth": str(n)},
    "extra_info": {"i": i},
  }


def test_rows_load_tokenize_and_drop_long_prompts(tmp_path, tok):
  path = _write(tmp_path / "a.jsonl", [_row(0), _row(1), _row(2, n=30)])
  src = prompts.JsonlSource([path], tok, max_prompt_len=16)
  assert len(src.items) == 2 and src.dropped_too_long == 1
  it = src.items[0]
  assert it.prompt_ids[0] == tok.bos_token_id  # the chat template's <bos>
  assert tok.decode(it.prompt_ids[1:]) == "1+1+1="
  assert it.reference == "3" and it.data_source == "chain_sum" and it.extra == {"i": 0}


@pytest.mark.parametrize(
  "bad,msg",
  [
    ("{not json", "row 2 is not valid JSON"),
    ({"prompt": "x", "reward_model": {"ground_truth": "1"}}, "row 2: 'data_source'"),
    (
      {"prompt": [{"text": "x"}], "data_source": "m", "reward_model": {"ground_truth": 1}},
      "row 2: 'prompt' must be a list",
    ),
    ({"prompt": "x", "data_source": "m"}, "row 2: 'reward_model.ground_truth' is missing"),
    (
      {"prompt": [{"role": "user", "content": 7}], "data_source": "m", "reward_model": {}},
      "row 2: 'prompt' message 0's content is int, not text",
    ),
    (
      '{"prompt": "x", "data_source": "math", "reward_model": {"ground_truth": NaN}}',
      "row 2: 'reward_model.ground_truth' is nan, not an answer",
    ),
  ],
)
def test_malformed_rows_name_file_and_row(tmp_path, tok, bad, msg):
  path = _write(tmp_path / "bad.jsonl", [_row(0), bad])
  with pytest.raises(prompts.DataError, match=msg) as e:
    prompts.JsonlSource([path], tok, max_prompt_len=16)
  assert "bad.jsonl" in str(e.value)


@pytest.mark.parametrize(
  "spec,msg",
  [
    ("reasoning_gym:chain_sum:1", "reasoning_gym:TASK:SEED:SIZE"),
    ("reasoning_gym:chain_sum:x:10", "reasoning_gym:TASK:SEED:SIZE"),
    ("reasoning_gym:propositional_logic:0:4", "propositional_logic' is not scored"),
  ],
)
def test_bad_generated_sources_are_one_line(tok, spec, msg):
  with pytest.raises(prompts.DataError, match=msg) as e:
    prompts.JsonlSource([spec], tok, max_prompt_len=16)
  assert "\n" not in str(e.value)


def test_an_unreadable_parquet_file_is_one_line(tmp_path, tok):
  path = tmp_path / "broken.parquet"
  path.write_bytes(b"PAR1 this is not parquet PAR1")
  with pytest.raises(prompts.DataError, match="broken.parquet: not a readable Parquet file"):
    prompts.JsonlSource([str(path)], tok, max_prompt_len=16)


def test_cursor_round_trip_continues_exactly(tmp_path, tok):
  path = _write(tmp_path / "a.jsonl", [_row(i, src="math", n=1 + i % 5) for i in range(7)])
  make = lambda: prompts.Blend(
    [
      prompts.JsonlSource([path], tok, max_prompt_len=16, seed=3),  # noqa: E731
      chain_sum.ChainSumSource(tok, seed=5),
    ],
    [0.5, 0.5],
    seed=1,
  )
  a = make()
  a.take(11)  # crosses an epoch of the 7-row file
  state = json.loads(json.dumps(a.state()))
  rest = [it.uid for it in a.take(9)]
  b = make()
  b.load_state(state)
  assert [it.uid for it in b.take(9)] == rest
  drawn = [it.data_source for it in make().take(40)]  # both sources serve, about evenly
  assert set(drawn) == {"chain_sum", "math"} and 10 <= drawn.count("math") <= 30


def test_heldout_prompts_are_excluded_from_training(tok):
  held = chain_sum.chain_sum_heldout(tok, 200)
  src = chain_sum.ChainSumSource(tok, seed=0, exclude={h.prompt for h in held})
  train = {src.next().prompt for _ in range(500)}
  assert not train & {h.prompt for h in held}


def test_parquet_rows_load_like_jsonl(tmp_path, tok):
  import pyarrow as pa
  import pyarrow.parquet as pq

  rows = [_row(0), _row(1, src="math", n=2)]
  pq.write_table(pa.Table.from_pylist(rows), str(tmp_path / "a.parquet"))
  src = prompts.JsonlSource([str(tmp_path / "a.parquet")], tok, max_prompt_len=16)
  assert [it.data_source for it in src.items] == ["chain_sum", "math"]
  assert src.items[1].reference == "2"


def test_reasoning_gym_procedural_source(tok):
  src = prompts.JsonlSource(
    ["reasoning_gym:basic_arithmetic:3:5"], tok, max_prompt_len=4096, use_chat_template=False
  )
  assert len(src.items) == 5 and src.items[0].data_source == "reasoning_gym"
  assert src.items[0].extra["entry"]["answer"] == src.items[0].reference


def test_an_unroutable_data_source_names_file_row_and_value(tmp_path, tok):
  path = _write(tmp_path / "a.jsonl", [_row(0), _row(1, src="mystery_set")])
  with pytest.raises(
    prompts.DataError,
    match=r"a.jsonl: row 2: no verifier for data_source "
    r"'mystery_set'.*data.reward_routing",
  ):
    prompts.JsonlSource([path], tok, max_prompt_len=64)
  src = prompts.JsonlSource([path], tok, max_prompt_len=64, routing={"mystery_set": "math"})
  assert src.verifiers == {"chain_sum", "math"}
  bad_val = _write(tmp_path / "val.jsonl", [_row(0, src="nope")])
  with pytest.raises(
    prompts.DataError, match="val.jsonl: row 1: no verifier for data_source 'nope'"
  ):
    prompts.make_sources(
      tok,
      train_files=[_write(tmp_path / "t.jsonl", [_row(0)])],
      val_files=[bad_val],
      weights=None,
      max_prompt_len=64,
      seed=0,
      heldout=1,
    )
  blend, _ = prompts.make_sources(
    tok,
    train_files=[path],
    val_files=[],
    weights=None,
    max_prompt_len=64,
    seed=0,
    heldout=1,
    routing={"mystery_set": "code"},
  )
  assert blend.verifiers == {"chain_sum", "code"}


def test_an_unknown_data_source_is_refused_before_the_model(tmp_path, monkeypatch):
  """The pre-flight names the row whose data_source has no verifier, before the demo's base
  model is built or any weights load: the build is never reached, and the answer takes seconds."""
  import json
  import time

  from configs import tiny
  from prorl_jax.data.prompts import DataError
  from prorl_jax.trainer import preflight, setup
  from prorl_jax.trainer.plan import Plan

  path = tmp_path / "bad.jsonl"
  row = {
    "data_source": "nosuch",
    "prompt": [{"role": "user", "content": "hi"}],
    "ability": "x",
    "reward_model": {"style": "rule", "ground_truth": "1"},
    "extra_info": {"index": 0},
  }
  path.write_text(json.dumps(row) + "\n")
  cfg = tiny.get_config()
  cfg.data.train_files, cfg.run_dir = str(path), str(tmp_path / "run")

  def never(*a, **k):
    raise AssertionError("the base model was built before the data was checked")

  monkeypatch.setattr(setup, "resolve_model_path", never)
  t0 = time.monotonic()
  with pytest.raises(DataError, match=r"bad.jsonl: row 1: no verifier for data_source 'nosuch'"):
    preflight.before_loading(cfg, Plan.from_config(cfg), False)
  assert time.monotonic() - t0 < 5
