"""What a config trains and validates on: the training blend, the held-out items and the
reward routing table, from `data.*` (prepared mix, files, a validation suite)."""

from __future__ import annotations

import os

from prorl_jax import config as config_lib
from prorl_jax.data import prompts, suite


def precheck(cfg) -> None:
  """What can be checked before any heavy work (the model load, the demo's base model build):
  the files the data keys name exist, the blend weights match them, the prepared mix and the
  validation suite are readable. Raises DataError with one line."""
  train, val = config_lib.items(cfg.data.train_files), config_lib.items(cfg.data.val_files)
  if cfg.data.prepared:
    p_train, _, p_val = prompts.prepared_files(cfg.data.prepared)
    train, val = train or p_train, val or p_val
  for key, files in (("data.train_files", train), ("data.val_files", val)):
    for f in files:
      if "://" not in f and not os.path.exists(f):
        raise prompts.DataError(f"{key}: {f}: no such file")
  weights = config_lib.items(cfg.data.weights)
  if weights and len(weights) != len(train):
    raise prompts.DataError(
      f"data.weights has {len(weights)} values for {len(train)} training "
      "files; give one weight per file, in the same order"
    )
  try:
    [float(w) for w in weights]
  except ValueError:
    raise prompts.DataError(f"data.weights must be numbers, got {cfg.data.weights!r}") from None
  if cfg.data.val_suite:
    try:
      suite.read_manifest(cfg.data.val_suite)
    except suite.PrepareError as e:
      raise prompts.DataError(f"data.val_suite: {e}") from None
  for f in train + val:  # every row parses (a bad one is named now, not after the model loads)
    if "://" not in f and not f.startswith("reasoning_gym:"):
      for i, row in enumerate(prompts.read_rows(f), 1):
        prompts.parse_row(row, f, i)


def sources_for(cfg, tok):
  """(training source, held-out items) for the config: `data.prepared` (a prepare output) or
  `data.train_files` / `data.val_files` / `data.weights`, which override it when set."""
  split = config_lib.items
  train, weights, val = (
    split(cfg.data.train_files),
    [float(w) for w in split(cfg.data.weights)] or None,
    split(cfg.data.val_files),
  )
  if cfg.data.prepared:
    p_train, p_weights, p_val = prompts.prepared_files(cfg.data.prepared)
    if not train:
      train, weights = p_train, weights or p_weights
    val = val or p_val
  if not train and not cfg.model.build_tiny:
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
    max_prompt_len=cfg.rollout.max_prompt_len,
    seed=cfg.seed,
    heldout=cfg.eval.heldout,
    routing=config_lib.routing_table(cfg),
    use_chat_template=cfg.data.chat_template,
  )
  if cfg.data.val_suite:
    heldout, verifiers = suite.validation_items(
      tok,
      cfg.data.val_suite,
      split(cfg.data.val_benchmarks),
      max_prompts=cfg.eval.max_prompts,
      max_prompt_len=cfg.rollout.max_prompt_len,
      seed=cfg.seed,
      routing=config_lib.routing_table(cfg),
      use_chat_template=cfg.data.chat_template,
    )
    blend.verifiers = set(blend.verifiers) | verifiers  # the run needs these verifiers too
  return blend, heldout
