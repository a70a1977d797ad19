"""What a run trains and validates on: the training blend, the held-out items and the reward
routing table, from a `DataSpec` (a prepared mix, files, a validation suite; `trainer.plan`
builds it from the config's `data.*` keys)."""

from __future__ import annotations

import dataclasses
import os
import types

from prorl_jax import config as config_lib
from prorl_jax.data import prompts, suite


@dataclasses.dataclass(frozen=True)
class DataSpec:
  """The data keys of a run (`data.*`, with the few `rollout.*`/`eval.*` keys the items need)."""

  train_files: tuple[str, ...] = ()
  weights: tuple[str, ...] = ()  # as given: `precheck` says when one is not a number
  val_files: tuple[str, ...] = ()
  prepared: str = ""  # a `prorl_jax.cli.prepare` output directory
  val_suite: str = ""
  val_benchmarks: tuple[str, ...] = ()
  build_tiny: bool = False  # the demo: the chain-sum task when no training files are given
  max_prompt_len: int = 1024
  seed: int = 0
  heldout: int = 0  # training items held out for validation when no validation files are given
  max_prompts: int = 0  # per validation benchmark (0: all)
  routing: types.MappingProxyType = dataclasses.field(
    default_factory=lambda: types.MappingProxyType({})
  )
  chat_template: bool = True


def precheck(spec: DataSpec) -> None:
  """What can be checked before any heavy work (the model load, the demo's base model build):
  the files the data keys name exist, the blend weights match them, the prepared mix and the
  validation suite are readable. Raises DataError with one line."""
  train, val = list(spec.train_files), list(spec.val_files)
  if spec.prepared:
    p_train, _, p_val = prompts.prepared_files(spec.prepared)
    train, val = train or p_train, val or p_val
  for key, files in (("data.train_files", train), ("data.val_files", val)):
    for f in files:
      if "://" not in f and not os.path.exists(f):
        raise prompts.DataError(f"{key}: {f}: no such file")
  weights = list(spec.weights)
  if weights and len(weights) != len(train):
    raise prompts.DataError(
      f"data.weights has {len(weights)} values for {len(train)} training "
      "files; give one weight per file, in the same order"
    )
  try:
    [float(w) for w in weights]
  except ValueError:
    raise prompts.DataError(f"data.weights must be numbers, got {','.join(weights)!r}") from None
  if spec.val_suite:
    try:
      suite.read_manifest(spec.val_suite)
    except suite.PrepareError as e:
      raise prompts.DataError(f"data.val_suite: {e}") from None
  for f in train + val:  # every row parses and has a verifier (named now, before the model)
    if "://" not in f and not f.startswith("reasoning_gym:"):
      for i, row in enumerate(prompts.read_rows(f), 1):
        prompts.routed(prompts.parse_row(row, f, i), spec.routing, f, i)


def sources_for(spec: DataSpec, tok):
  """(training source, held-out items): `spec.prepared` (a prepare output) or
  `train_files` / `val_files` / `weights`, which override it when set."""
  train, weights, val = (
    list(spec.train_files),
    [float(w) for w in spec.weights] or None,
    list(spec.val_files),
  )
  if spec.prepared:
    p_train, p_weights, p_val = prompts.prepared_files(spec.prepared)
    if not train:
      train, weights = p_train, weights or p_weights
    val = val or p_val
  if not train and not spec.build_tiny:
    raise config_lib.ConfigError(
      "data.train_files is empty: pass data.prepared=DIR (python -m "
      "prorl_jax.cli.prepare --mix=prorl --out=DIR) or JSONL/Parquet "
      "files in the verl schema (--config.data.train_files=a,b)"
    )
  blend, heldout = prompts.make_sources(
    tok,
    train_files=train,
    val_files=val,
    weights=weights,
    max_prompt_len=spec.max_prompt_len,
    seed=spec.seed,
    heldout=spec.heldout,
    routing=dict(spec.routing),
    use_chat_template=spec.chat_template,
  )
  if spec.val_suite:
    heldout, verifiers = suite.validation_items(
      tok,
      spec.val_suite,
      list(spec.val_benchmarks),
      max_prompts=spec.max_prompts,
      max_prompt_len=spec.max_prompt_len,
      seed=spec.seed,
      routing=dict(spec.routing),
      use_chat_template=spec.chat_template,
    )
    blend.verifiers = set(blend.verifiers) | verifiers  # the run needs these verifiers too
  return blend, heldout
