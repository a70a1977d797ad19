"""Reading a dataset for `python -m prorl_jax.prepare`: a local JSONL / JSON / Parquet file or a
directory of them, or a Hugging Face dataset through `datasets` (the commit used is recorded);
every row converted or counted as malformed with its reason."""

from __future__ import annotations

import collections
import dataclasses
import glob
import json
import os
from typing import Callable


class Malformed(ValueError):
  """A row that cannot become a training item; the message is the reason (counted)."""


class PrepareError(ValueError):
  """A user-fixable problem (a missing column, a bad flag); printed as one line."""


@dataclasses.dataclass(frozen=True)
class Source:
  name: str  # the --source / --revision key
  domain: str
  dataset: str  # Hugging Face dataset id ("" = generated here)
  columns: tuple[str, ...]  # required columns
  convert: Callable[[dict], dict]
  split: str = "train"
  data_dir: str | None = None
  license: str = ""
  config: str | None = None  # the dataset's configuration (subset) name
  data_files: tuple[str, ...] | None = None  # files of the dataset repository to read


def read_local(path: str) -> list[dict]:
  """Rows of a JSONL / JSON / Parquet file, or of every such file in a directory (sorted)."""
  if os.path.isdir(path):
    files = sorted(
      f
      for ext in ("jsonl", "json", "parquet")
      for f in glob.glob(os.path.join(path, f"**/*.{ext}"), recursive=True)
    )
    if not files:
      raise PrepareError(f"{path} holds no .jsonl, .json or .parquet files")
    return [r for f in files for r in read_local(f)]
  if not os.path.isfile(path):
    raise PrepareError(f"{path}: no such file")
  if path.endswith(".parquet"):
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()
  with open(path) as f:
    if path.endswith(".json"):
      doc = json.load(f)
      return doc if isinstance(doc, list) else [doc]
    rows = []
    for i, line in enumerate(f, 1):
      if line.strip():
        try:
          rows.append(json.loads(line))
        except ValueError:
          raise PrepareError(f"{path}: line {i} is not JSON") from None
    return rows


def download(src: Source, revision: str) -> tuple[list[dict], str]:
  """(rows, resolved commit) of a Hugging Face dataset split, through `datasets`."""
  try:
    import datasets
    from huggingface_hub import HfApi
  except ImportError as e:
    raise PrepareError(
      f"downloading {src.dataset} needs `datasets` ({e}); pip install "
      f"datasets==4.8.5, or pass --source {src.name}=PATH"
    ) from None
  try:
    sha = HfApi().dataset_info(src.dataset, revision=revision).sha
    ds = datasets.load_dataset(
      src.dataset,
      src.config,
      data_dir=src.data_dir,
      data_files=list(src.data_files) if src.data_files else None,
      split=src.split,
      revision=sha,
    )
  except Exception as e:  # noqa: BLE001 - network, auth, missing split: one line, the fix
    raise PrepareError(
      f"cannot download {src.dataset}@{revision} ({type(e).__name__}: "
      f"{str(e)[:200]}); check the network or pass --source "
      f"{src.name}=PATH"
    ) from None
  return ds.to_list(), sha


def load_source(
  src: Source, local: dict[str, str], revisions: dict[str, str]
) -> tuple[list[dict], collections.Counter, dict]:
  """(converted rows, malformed reasons counted, provenance) of one source: read locally or
  downloaded, its columns checked (a missing one stops with one line), every row converted."""
  if src.name in local:
    raw, revision = read_local(local[src.name]), f"local:{os.path.abspath(local[src.name])}"
  else:
    raw, revision = download(src, revisions.get(src.name, "main"))
  info = {"dataset": src.dataset, "revision": revision, "split": src.split, "license": src.license}
  if src.config:
    info["config"] = src.config
  if raw:
    missing = [c for c in src.columns if c not in raw[0]]
    if missing:
      raise PrepareError(
        f"{src.dataset}@{revision}: column {missing[0]!r} is missing "
        f"(columns: {', '.join(sorted(raw[0]))}); the dataset's schema "
        f"changed: pin an older --revision {src.name}=SHA or update "
        "prorl_jax/prepare.py"
      )
  converted, bad = [], collections.Counter()
  for row in raw:
    try:
      converted.append(src.convert(row))
    except Malformed as e:
      bad[str(e)] += 1
    except KeyError as e:  # a data_source without a verifier
      bad[str(e.args[0]).split(";")[0]] += 1
  info["rows_read"] = len(raw)
  return converted, bad, info
