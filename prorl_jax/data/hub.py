"""Reading a dataset for `python -m prorl_jax.cli.prepare`: a Hugging Face dataset repository
(through `datasets`, or through `huggingface_hub` for the raw files of a repository `datasets`
cannot load; the commit used is recorded), a local copy of one, or a local JSONL / JSON / Parquet /
CSV file or directory of them; every row converted or counted as malformed with its reason."""

from __future__ import annotations

import collections
import dataclasses
import fnmatch
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
  """One dataset the preparation reads: where it comes from (a Hugging Face id, or generated),
  the columns a row must have, and the converter that turns a row into a verl-schema row or
  raises `Malformed` naming the column."""

  name: str  # the --source / --revision key
  domain: str
  dataset: str  # Hugging Face dataset id ("" = generated here)
  columns: tuple[str, ...]  # required columns
  convert: Callable[[dict], dict]
  split: str = "train"
  license: str = ""
  config: str | None = None  # the dataset's configuration (subset) name
  # Glob patterns of the repository's files to read as they are, for repositories `datasets`
  # cannot load (a loading script); None = `datasets` with `config` and `split`.
  files: tuple[str, ...] | None = None


DATA_EXTENSIONS = ("jsonl", "json", "parquet", "csv")


def read_local(path: str) -> list[dict]:
  """Rows of a JSONL / JSON / Parquet / CSV file, or of every such file in a directory
  (sorted)."""
  if os.path.isdir(path):
    files = sorted(
      f
      for ext in DATA_EXTENSIONS
      for f in glob.glob(os.path.join(path, f"**/*.{ext}"), recursive=True)
    )
    if not files:
      raise PrepareError(f"{path} holds no .jsonl, .json, .parquet or .csv files")
    return [r for f in files for r in read_local(f)]
  if not os.path.isfile(path):
    raise PrepareError(f"{path}: no such file")
  if path.endswith(".parquet"):
    import pyarrow.parquet as pq  # lazy: pyarrow only for Parquet and CSV files

    return pq.read_table(path).to_pylist()
  if path.endswith(".csv"):
    import pyarrow.csv as pcsv  # lazy: as above

    try:  # quoted fields may span lines (GPQA's questions do)
      table = pcsv.read_csv(path, parse_options=pcsv.ParseOptions(newlines_in_values=True))
    except Exception as e:  # noqa: BLE001 - pyarrow's parse errors: one line
      raise PrepareError(f"{path}: not a CSV table ({str(e)[:200]})") from None
    return table.to_pylist()
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


def _matching(root: str, patterns: tuple[str, ...]) -> list[str]:
  """The files under `root` whose repository path matches one of the glob patterns, sorted."""
  found = []
  for dirpath, dirs, names in os.walk(root):
    dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # hf download's .cache/
    for n in names:
      rel = os.path.relpath(os.path.join(dirpath, n), root).replace(os.sep, "/")
      if any(fnmatch.fnmatchcase(rel, p) for p in patterns):
        found.append(os.path.join(dirpath, n))
  return sorted(found)


def _one_line(e: Exception) -> str:
  """An exception as one line: its type and message, whitespace folded."""
  return " ".join(f"{type(e).__name__}: {e}".split())


def _read_files(src: Source, files: list[str], where: str) -> list[dict]:
  if not files:
    raise PrepareError(
      f"{where}: no file matches {', '.join(src.files)}; the repository's layout changed: pin "
      f"an older --revision {src.name}=SHA or update the source"
    )
  return [r for f in files for r in read_local(f)]


def _load_dataset(src: Source, repo: str, revision: str | None = None) -> list[dict]:
  """Rows of `src` from a dataset repository through `datasets`: a Hub id at `revision`, or a
  local copy of the repository (read the same way: its card's configurations and splits)."""
  import datasets  # lazy: slow to import, and only preparation downloads

  return datasets.load_dataset(repo, src.config, split=src.split, revision=revision).to_list()


def download(src: Source, revision: str) -> tuple[list[dict], str]:
  """(rows, resolved commit) of a Hugging Face dataset split: through `datasets`, or the
  source's `files` through `huggingface_hub`."""
  try:
    import datasets  # noqa: F401 - checked here for the one-line error
    import huggingface_hub  # lazy: as datasets
  except ImportError as e:
    raise PrepareError(
      f"downloading {src.dataset} needs `datasets` ({e}); pip install "
      f"datasets==4.8.5, or pass --source {src.name}=PATH"
    ) from None
  try:
    sha = huggingface_hub.HfApi().dataset_info(src.dataset, revision=revision).sha
    if src.files:
      root = huggingface_hub.snapshot_download(
        src.dataset, repo_type="dataset", revision=sha, allow_patterns=list(src.files)
      )
      return _read_files(src, _matching(root, src.files), f"{src.dataset}@{sha}"), sha
    return _load_dataset(src, src.dataset, sha), sha
  except PrepareError:
    raise
  except Exception as e:  # noqa: BLE001 - network, auth, missing split: one line, the fix
    text = _one_line(e)
    if "gated" in text.lower():
      raise PrepareError(
        f"{src.dataset} is gated: accept its terms at https://huggingface.co/datasets/"
        f"{src.dataset} and log in (`hf auth login`), or pass --source {src.name}=PATH"
      ) from None
    raise PrepareError(
      f"cannot download {src.dataset}@{revision} ({text[:240]}); check the network or pass "
      f"--source {src.name}=PATH"
    ) from None


def read_copy(src: Source, path: str) -> list[dict]:
  """Rows of `src` from a local path: a copy of its Hub repository (`hf download --repo-type
  dataset ID --local-dir PATH`) reads as the Hub does; any other file or directory of JSONL /
  JSON / Parquet / CSV files is read whole."""
  if os.path.isdir(path) and src.dataset:
    files = _matching(path, src.files) if src.files else []
    if files:
      return _read_files(src, files, path)
    if not src.files and os.path.isfile(os.path.join(path, "README.md")):
      try:
        return _load_dataset(src, path)
      except Exception as e:  # noqa: BLE001 - a copy datasets cannot read: one line
        text = _one_line(e)
        raise PrepareError(
          f"{path}: cannot read it as a copy of {src.dataset} ({text[:240]}); pass the "
          "repository's directory or its data files"
        ) from None
  return read_local(path)


def load_source(
  src: Source, local: dict[str, str], revisions: dict[str, str]
) -> tuple[list[dict], collections.Counter, dict]:
  """(converted rows, malformed reasons counted, provenance) of one source: read locally or
  downloaded, every row checked and converted or counted under a reason naming its column; a
  source none of whose rows converts stops with one line naming the reason and the schema."""
  if src.name in local:
    raw, revision = read_copy(src, local[src.name]), f"local:{os.path.abspath(local[src.name])}"
  else:
    raw, revision = download(src, revisions.get(src.name, "main"))
  info = {"dataset": src.dataset, "revision": revision, "split": src.split, "license": src.license}
  if src.config:
    info["config"] = src.config
  converted, bad = [], collections.Counter()
  for row in raw:
    # every row is checked for itself: a row lacking a column is counted under that column,
    # wherever it stands in the file, and never stops the rest
    missing = [c for c in src.columns if not isinstance(row, dict) or row.get(c) is None]
    if missing:
      bad[f"missing column {missing[0]!r}"] += 1
      continue
    try:
      converted.append(src.convert(row))
    except Malformed as e:
      bad[str(e)] += 1
    except KeyError as e:  # a data_source without a verifier
      bad[str(e.args[0]).split(";")[0]] += 1
    except (TypeError, AttributeError, ValueError) as e:  # a layout no check foresaw: counted
      bad[f"unreadable row ({type(e).__name__}: {str(e)[:60]})"] += 1
  if raw and not converted:
    reason, n = bad.most_common(1)[0]
    raise PrepareError(
      f"{src.dataset}@{revision}: none of its {len(raw)} rows converts ({n} with {reason}); "
      f"{src.name} rows need the columns {', '.join(src.columns)} (docs/data.md): pin another "
      f"--revision {src.name}=SHA or fix the copy"
    )
  info["rows_read"] = len(raw)
  return converted, bad, info
