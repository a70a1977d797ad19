"""Prompt sources with a deterministic order whose cursor is a small state dict.

An item is a dict: {uid, prompt_ids, data_source, reference, extra}. Sources:
- `JsonlSource`: JSONL or Parquet rows in the verl schema (`prompt` as chat messages,
  `data_source`, `reward_model.ground_truth`, `extra_info`), tokenized with the chat template;
  prompts over the length limit are dropped and counted; shuffled per epoch from the seed.
- the CPU demo's procedural task (`demo.chain_sum.ChainSumSource`), with a held-out set excluded.
- `Blend`: several sources mixed with weights.
`state()` / `load_state()` round-trip through checkpoints so a resumed run draws the same prompts.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np

from prorl_jax import rewards
from prorl_jax.demo import chain_sum
from prorl_jax.model.tokenizer import prompt_ids
from prorl_jax.records import PromptItem
from prorl_jax.rewards import puzzles


class DataError(ValueError):
  """A malformed dataset row: names the file and row."""


def read_rows(path: str) -> list[dict]:
  """The rows of a JSONL or Parquet file, or of a generated reasoning_gym:TASK:SEED:SIZE source."""
  if path.startswith("reasoning_gym:"):  # reasoning_gym:TASK:SEED:SIZE
    parts = path.split(":")
    if len(parts) != 4 or not (parts[2].isdigit() and parts[3].isdigit()) or not parts[1]:
      raise DataError(
        f"{path}: a generated source is reasoning_gym:TASK:SEED:SIZE "
        "(e.g. reasoning_gym:chain_sum:0:1000)"
      )
    try:
      return puzzles.make_items(parts[1], seed=int(parts[2]), size=int(parts[3]))
    except ValueError as e:
      raise DataError(f"{path}: {e}") from None
  if not os.path.isfile(path):
    raise DataError(f"{path}: no such file (data.train_files / data.val_files)")
  if path.endswith(".parquet"):
    import pyarrow as pa  # lazy: pyarrow only for Parquet files
    import pyarrow.parquet as pq

    try:
      return pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as e:
      raise DataError(f"{path}: not a readable Parquet file ({str(e)[:160]})") from None
  rows = []
  with open(path) as f:
    for i, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        rows.append(json.loads(line))
      except ValueError as e:
        raise DataError(f"{path}: row {i} is not valid JSON ({e})") from None
  return rows


def _without_nulls(value):
  """Mappings without their null entries, all the way down (lists kept as they are, their
  mappings cleaned)."""
  if isinstance(value, dict):
    return {k: _without_nulls(v) for k, v in value.items() if v is not None}
  if isinstance(value, list):
    return [_without_nulls(v) for v in value]
  return value


def parse_row(row, path: str, i: int) -> dict:
  """One verl-schema row -> {messages, data_source, reference, extra}; one-line errors."""
  where = f"{path}: row {i}"
  if not isinstance(row, dict):
    raise DataError(f"{where} is not an object")
  prompt = row.get("prompt")
  if isinstance(prompt, str):
    prompt = [{"role": "user", "content": prompt}]
  if not (
    isinstance(prompt, list)
    and prompt
    and all(isinstance(m, dict) and "role" in m and "content" in m for m in prompt)
  ):
    raise DataError(f"{where}: 'prompt' must be a list of {{role, content}} chat messages")
  bad = [k for k, m in enumerate(prompt) if not isinstance(m["content"], str)]
  if bad:
    got = type(prompt[bad[0]]["content"]).__name__
    raise DataError(f"{where}: 'prompt' message {bad[0]}'s content is {got}, not text")
  if not isinstance(row.get("data_source"), str):
    raise DataError(f"{where}: 'data_source' (a string naming the verifier) is missing")
  rm = row.get("reward_model") or {}
  if not isinstance(rm, dict) or "ground_truth" not in rm:
    raise DataError(f"{where}: 'reward_model.ground_truth' is missing")
  truth = rm["ground_truth"]
  if isinstance(truth, float) and not math.isfinite(truth):
    raise DataError(f"{where}: 'reward_model.ground_truth' is {truth}, not an answer")
  extra = row.get("extra_info") or {}
  if isinstance(extra, str):  # prepared Parquet files keep it as JSON (keys differ by source)
    try:
      extra = json.loads(extra)
    except ValueError:
      raise DataError(f"{where}: 'extra_info' is a string but not JSON") from None
  if not isinstance(extra, dict):
    raise DataError(f"{where}: 'extra_info' must be an object")
  extra = _without_nulls(extra)  # a Parquet struct's keys are the union over its file's rows
  return {
    "messages": prompt,
    "data_source": row["data_source"],
    "reference": rm["ground_truth"],
    "extra": extra,
  }


def prepared_files(directory: str) -> tuple[list[str], list[float], list[str]]:
  """(train files, blend weights, validation files) of a `python -m prorl_jax.cli.prepare` output:
  the weights are the training rows per file, so the blend follows the mix's counts."""
  path = os.path.join(directory, "manifest.json")
  try:
    with open(path) as f:
      m = json.load(f)
    train = [os.path.join(directory, rel) for rel in m["train_files"]]
    weights = [float(w) for w in m["weights"]]
    val = [os.path.join(directory, rel) for rel in m["val_files"]]
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise DataError(
      f"data.prepared={directory!r}: no readable manifest.json ({e}); build it "
      "with python -m prorl_jax.cli.prepare --mix=prorl --out=DIR"
    ) from None
  for f in train + val:
    if not os.path.isfile(f):
      raise DataError(f"data.prepared={directory!r}: {f} listed in manifest.json is missing")
  return train, weights, val


def routed(row: dict, routing, path: str, i: int) -> str:
  """The verifier a parsed row's data_source routes to; a one-line DataError naming the file,
  row and value when there is none."""
  try:
    return rewards.verifier_name(row["data_source"], routing)
  except KeyError as e:
    raise DataError(f"{path}: row {i}: {e.args[0]}") from None


class JsonlSource:
  """Rows of verl-schema files; every row's data_source must route to a verifier (`routing`:
  extra source -> verifier pairs), else a one-line DataError names the file, row and value."""

  def __init__(
    self,
    files: list[str],
    tokenizer,
    *,
    max_prompt_len: int,
    seed: int = 0,
    use_chat_template: bool = True,
    routing: dict[str, str] | None = None,
  ):
    self.items, self.dropped_too_long = [], 0
    self.verifiers: set[str] = set()
    for path in files:
      for i, row in enumerate(read_rows(path), 1):
        r = parse_row(row, path, i)
        self.verifiers.add(routed(r, routing, path, i))
        ids = prompt_ids(tokenizer, r.pop("messages"), use_chat_template)
        if len(ids) > max_prompt_len:
          self.dropped_too_long += 1
          continue
        self.items.append(
          PromptItem(
            prompt_ids=ids,
            data_source=r["data_source"],
            reference=r["reference"],
            uid=f"{os.path.basename(path)}:{i}",
            extra=r["extra"],
          )
        )
    if not self.items:
      raise DataError(
        f"no usable prompts in {files} ({self.dropped_too_long} over "
        f"max_prompt_len={max_prompt_len})"
      )
    self.seed = seed
    self.cursor = {"epoch": 0, "index": 0}

  def _order(self, epoch: int) -> np.ndarray:
    return np.random.RandomState(self.seed + epoch).permutation(len(self.items))

  def next(self) -> PromptItem:
    c = self.cursor
    if c["index"] >= len(self.items):
      c["epoch"], c["index"] = c["epoch"] + 1, 0
    item = self.items[self._order(c["epoch"])[c["index"]]]
    c["index"] += 1
    return item

  def state(self) -> dict:
    return dict(self.cursor)

  def load_state(self, state: dict):
    self.cursor = dict(state)


class Blend:
  """Mixes sources with weights; which source serves item k is drawn from (seed, k)."""

  def __init__(self, sources: list, weights: list[float] | None = None, seed: int = 0):
    w = np.asarray(weights or [1.0] * len(sources), np.float64)
    if len(w) != len(sources) or (w < 0).any() or w.sum() <= 0:
      raise DataError(f"data.weights must be {len(sources)} non-negative numbers, got {weights}")
    self.sources, self.p, self.seed = sources, w / w.sum(), seed
    self.count = 0
    self.verifiers = set().union(*(s.verifiers for s in sources))  # the verifiers it needs

  def next(self) -> PromptItem:
    k = np.random.RandomState((self.seed, self.count)).choice(len(self.sources), p=self.p)
    self.count += 1
    return self.sources[k].next()

  def take(self, k: int) -> list[PromptItem]:
    return [self.next() for _ in range(k)]

  def state(self) -> dict:
    return {"count": self.count, "sources": [s.state() for s in self.sources]}

  def load_state(self, state: dict):
    self.count = state["count"]
    for s, st in zip(self.sources, state["sources"]):
      s.load_state(st)


def make_sources(
  tok,
  *,
  train_files: list[str],
  val_files: list[str],
  weights: list[float] | None,
  max_prompt_len: int,
  seed: int,
  heldout: int,
  routing: dict[str, str] | None = None,
  use_chat_template: bool = True,
) -> tuple[Blend, list[dict]]:
  """(training source, held-out items): dataset files, or the demo's procedural chain sums with
  `heldout` held-out prompts (the first 1,000 held-out prompts never appear in training)."""
  if train_files:
    srcs = [
      JsonlSource(
        [f],
        tok,
        max_prompt_len=max_prompt_len,
        seed=seed + i,
        routing=routing,
        use_chat_template=use_chat_template,
      )
      for i, f in enumerate(train_files)
    ]
    val = []
    if val_files:
      val_src = JsonlSource(
        val_files,
        tok,
        max_prompt_len=max_prompt_len,
        seed=seed,
        routing=routing,
        use_chat_template=use_chat_template,
      )
      srcs[0].verifiers |= val_src.verifiers  # the run needs the held-out set's verifiers too
      val = val_src.items
    return Blend(srcs, weights, seed=seed), val
  exclude = {it.prompt for it in chain_sum.chain_sum_heldout(tok, max(1000, heldout))}
  src = chain_sum.ChainSumSource(tok, seed=seed * 7919 + 2, exclude=exclude)
  return Blend([src], seed=seed), chain_sum.chain_sum_heldout(tok, heldout)
