"""Reading a source from its Hugging Face repository: copies of the repositories in their
published layouts (files, dataset-card configurations, a loading script) read through the real
`datasets` and the project's file readers, as `prepare` reads them from the Hub."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prorl_jax.cli import prepare
from prorl_jax.data import hub, suite
from tests import prepare_test, suite_test

# The dataset cards' YAML headers, in the form the repositories publish them.
NEMOTRON_CARD = """---
license: cc-by-4.0
configs:
- config_name: SFT
  data_files:
  - split: code
    path: SFT/code/*.jsonl
  - split: math
    path: SFT/math/*.jsonl
  default: true
- config_name: RL
  data_files:
  - split: instruction_following
    path: RL/instruction_following/*.jsonl
---
# Llama-Nemotron-Post-Training-Dataset
"""
GPQA_CARD = """---
license: cc-by-4.0
configs:
- config_name: gpqa_extended
  data_files: gpqa_extended.csv
- config_name: gpqa_main
  data_files: gpqa_main.csv
- config_name: gpqa_diamond
  data_files: gpqa_diamond.csv
---
# GPQA
"""
GPQA_HEADER = "Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3\n"


def _jsonl(path, rows):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _hf_download_cache(root):
  """What `hf download --local-dir` leaves beside the files: metadata under .cache/."""
  meta = root / ".cache" / "huggingface" / "download"
  meta.mkdir(parents=True)
  (meta / "test.jsonl.metadata").write_text("sha\netag\n")
  (meta / "junk.jsonl").write_text("not json\n")


def _repo(tmp_path, name, files: dict):
  root = tmp_path / name
  for rel, content in files.items():
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, list):  # rows
      if rel.endswith(".parquet"):
        pq.write_table(pa.Table.from_pylist(content), p)
      elif rel.endswith(".json"):
        p.write_text(json.dumps(content))
      else:
        _jsonl(p, content)
    else:
      p.write_text(content)
  _hf_download_cache(root)
  return str(root)


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
  d = tmp_path_factory.mktemp("repos")
  eurus_train, eurus_val = prepare_test._eurus(6), prepare_test._eurus(3)
  for r in eurus_val:
    r["prompt"] = [dict(m, content=m["content"] + " (validation)") for m in r["prompt"]]
  sft_row = {"input": "Write code.", "output": "x", "category": "code", "license": "cc-by-4.0"}
  lcb = suite_test.FIXTURES["livecodebench"]
  gpqa_rows = [
    '"Which is right,\nreally #1?",right,w1,w2,w3\n',
    '"Which is right #2?","right, sure",w1,w2,w3\n',
  ]
  return {
    # agentica-org/DeepScaleR-Preview-Dataset: one JSON array at the root, a card without YAML
    "deepscaler": _repo(
      d,
      "deepscaler",
      {"README.md": "# DeepScaleR\n", "deepscaler.json": prepare_test._deepscaler(5)},
    ),
    # PRIME-RL/Eurus-2-RL-Data: train.parquet and validation.parquet at the root
    "eurus": _repo(
      d,
      "eurus",
      {
        "README.md": "# Eurus-2-RL-Data\n",
        "train.parquet": eurus_train,
        "validation.parquet": eurus_val,
      },
    ),
    # nvidia/Llama-Nemotron-Post-Training-Dataset: SFT (the default configuration) and RL
    "nemotron": _repo(
      d,
      "nemotron",
      {
        "README.md": NEMOTRON_CARD,
        "SFT/code/code_v1.1.jsonl": [sft_row] * 3,
        "SFT/math/math_v1.1.jsonl": [dict(sft_row, category="math")] * 2,
        "RL/instruction_following/if_train.jsonl": prepare_test._nemotron_if(4),
      },
    ),
    # livecodebench/code_generation_lite: a loading script beside one JSONL file per release
    "lcb": _repo(
      d,
      "lcb",
      {
        "README.md": "---\nlicense: cc\n---\n# LiveCodeBench\n",
        "code_generation_lite.py": "import datasets\n",
        "test.jsonl": lcb[:2],
        "test5.jsonl": lcb[2:],
      },
    ),
    # Idavidrein/gpqa: one CSV per configuration, quoted fields spanning lines
    "gpqa": _repo(
      d,
      "gpqa",
      {
        "README.md": GPQA_CARD,
        "gpqa_diamond.csv": GPQA_HEADER + "".join(gpqa_rows),
        "gpqa_main.csv": GPQA_HEADER + '"Main only?",a,b,c,d\n' * 3,
        "gpqa_extended.csv": GPQA_HEADER + '"Extended only?",a,b,c,d\n',
      },
    ),
  }


def _load(src, path):
  return hub.load_source(src, {src.name: path}, {})


def test_a_json_array_repository(repos):
  rows, bad, info = _load(prepare.SOURCES["deepscaler"], repos["deepscaler"])
  # 5 problems + a case-folded duplicate (dedup is the mix's job) + one with an empty answer
  assert len(rows) == 6 and dict(bad) == {"column 'answer' is empty": 1}
  assert rows[3]["reward_model"]["ground_truth"] == "6"
  assert info["rows_read"] == 7 and info["revision"].startswith("local:")


def test_the_source_split_is_read_and_no_other(repos):
  train, _, _ = _load(prepare.SOURCES["eurus_code"], repos["eurus"])
  val, _, _ = _load(suite.SOURCES["prime_val"], repos["eurus"])
  assert len(train) == 6 and len(val) == 3
  assert all("(validation)" not in r["prompt"][-1]["content"] for r in train)
  assert all(r["prompt"][-1]["content"].endswith("(validation)") for r in val)


def test_a_configuration_that_is_not_the_default(repos):
  # The RL configuration's split, not the SFT default's files (which lack `args`).
  rows, bad, info = _load(prepare.SOURCES["nemotron_if"], repos["nemotron"])
  assert info["rows_read"] == 5 and len(rows) == 4
  assert dict(bad) == {
    "column 'args.instruction_id_list': unsupported instruction detectable_format:emoji_only": 1
  }
  assert all(r["data_source"] == "llama_nemotron_if" for r in rows)


def test_a_repository_with_a_loading_script_is_read_from_its_files(repos):
  # `datasets` 4 refuses the script; the source reads its test*.jsonl files instead.
  src = suite.SOURCES["livecodebench"]
  rows, bad, info = _load(src, repos["lcb"])
  assert info["rows_read"] == 4  # both release files, nothing from .cache/
  assert len(rows) == 2 and set(bad) == {
    "column 'contest_date' outside [2024-08-01, 2025-02-01)",
    "column 'private_test_cases' holds a pickled GLOBAL, not text",
  }


def test_csv_configurations_with_multiline_fields(repos):
  rows, bad, info = _load(suite.SOURCES["gpqa_diamond"], repos["gpqa"])
  assert info["rows_read"] == 2 and not bad
  texts = [r["prompt"][-1]["content"] for r in rows]
  assert "Which is right,\nreally #1?" in texts[0] and "Which is right #2?" in texts[1]
  key = rows[1]["reward_model"]["ground_truth"]
  assert f"{key}) right, sure\n" in texts[1]  # a quoted comma stays in its field
  # the same file read alone (a CSV path) gives the same rows
  alone, _, _ = _load(suite.SOURCES["gpqa_diamond"], repos["gpqa"] + "/gpqa_diamond.csv")
  assert alone == rows


def test_a_directory_that_is_no_repository_copy_is_read_whole(tmp_path):
  d = tmp_path / "plain"
  _jsonl(d / "a.jsonl", prepare_test._deepscaler(2)[:2])
  pq.write_table(pa.Table.from_pylist(prepare_test._deepscaler(4)[2:4]), d / "b.parquet")
  rows, _, info = _load(prepare.SOURCES["deepscaler"], str(d))
  assert [r["reward_model"]["ground_truth"] for r in rows] == ["0", "2", "4", "6"]


def test_a_copy_datasets_cannot_read_is_one_line(tmp_path):
  d = tmp_path / "broken"
  d.mkdir()
  (d / "README.md").write_text(NEMOTRON_CARD)  # configurations whose files are missing
  with pytest.raises(prepare.PrepareError) as e:
    _load(prepare.SOURCES["nemotron_if"], str(d))
  msg = str(e.value)
  assert "\n" not in msg and msg.startswith(f"{d}: cannot read it as a copy of nvidia/")


class _Info:
  sha = "0123abcd" * 5


def test_download_pins_the_resolved_commit(monkeypatch, repos):
  """The Hub calls, around the same readers: the commit `dataset_info` resolves is the one
  every file is read at, and recorded."""
  import datasets
  import huggingface_hub

  calls = []

  class Api:
    def dataset_info(self, repo, revision):
      calls.append(("info", repo, revision))
      return _Info()

  def snapshot(repo, repo_type, revision, allow_patterns):
    calls.append(("snapshot", repo, repo_type, revision, tuple(allow_patterns)))
    return repos["lcb"]

  real_load = datasets.load_dataset

  def load(repo, config, split, revision):
    calls.append(("load", repo, config, split, revision))
    return real_load(repos["nemotron"], config, split=split)

  monkeypatch.setattr(huggingface_hub, "HfApi", Api)
  monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot)
  monkeypatch.setattr(datasets, "load_dataset", load)
  rows, bad, info = hub.load_source(suite.SOURCES["livecodebench"], {}, {"livecodebench": "v5"})
  assert len(rows) == 2 and info["revision"] == _Info.sha
  rows, bad, info = hub.load_source(prepare.SOURCES["nemotron_if"], {}, {})
  assert len(rows) == 4 and info["revision"] == _Info.sha
  assert calls == [
    ("info", "livecodebench/code_generation_lite", "v5"),
    ("snapshot", "livecodebench/code_generation_lite", "dataset", _Info.sha, ("test*.jsonl",)),
    ("info", "nvidia/Llama-Nemotron-Post-Training-Dataset", "main"),
    (
      "load",
      "nvidia/Llama-Nemotron-Post-Training-Dataset",
      "RL",
      "instruction_following",
      _Info.sha,
    ),
  ]


@pytest.mark.parametrize(
  "error,want",
  [
    (
      "Dataset 'Idavidrein/gpqa' is a gated dataset on the Hub. You must be authenticated",
      "Idavidrein/gpqa is gated: accept its terms at https://huggingface.co/datasets/"
      "Idavidrein/gpqa and log in (`hf auth login`), or pass --source gpqa_diamond=PATH",
    ),
    ("Couldn't reach 'Idavidrein/gpqa' on the Hub", "check the network or pass --source"),
  ],
)
def test_download_errors_are_one_line_with_the_fix(monkeypatch, error, want):
  import huggingface_hub

  class Api:
    def dataset_info(self, repo, revision):
      raise ConnectionError(error + "\n(more lines)")

  monkeypatch.setattr(huggingface_hub, "HfApi", Api)
  with pytest.raises(prepare.PrepareError) as e:
    hub.load_source(suite.SOURCES["gpqa_diamond"], {}, {})
  assert want in str(e.value) and "\n" not in str(e.value).replace("\\n", "")


def test_a_layout_without_the_files_stops_with_one_line(monkeypatch, tmp_path):
  import huggingface_hub

  empty = tmp_path / "empty"
  (empty / "data").mkdir(parents=True)

  class Api:
    def dataset_info(self, repo, revision):
      return _Info()

  monkeypatch.setattr(huggingface_hub, "HfApi", Api)
  monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: str(empty))
  with pytest.raises(prepare.PrepareError) as e:
    hub.load_source(suite.SOURCES["livecodebench"], {}, {})
  assert str(e.value) == (
    f"livecodebench/code_generation_lite@{_Info.sha}: no file matches test*.jsonl; the "
    "repository's layout changed: pin an older --revision livecodebench=SHA or update the source"
  )
