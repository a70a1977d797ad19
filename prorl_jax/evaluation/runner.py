"""`python -m prorl_jax.cli.eval --suite=prorl-eval --data=DIR --checkpoint=MODEL --out=OUT`: the
paper's evaluation of one model on every benchmark of a `prepare --suite` output.

MODEL is a Hugging Face directory, an Orbax checkpoint (RUN_DIR, RUN_DIR/checkpoints or one
step: exported to OUT/model-step-N first) or a published version (EXCHANGE@VERSION, e.g.
runs/x/exchange@12). Sampling as the paper evaluates: temperature 0.6, top-p 0.95, 16 samples per
prompt for math, code and STEM (pass@1 = mean over samples of score == 1), 4 for instruction
following and Reasoning Gym (the mean continuous score); the response budget is a flag (the
paper: 32K tokens). Each finished benchmark is cached in OUT/benchmarks/NAME.json with every
sample's score, keyed by the model's files, the benchmark file's sha256 and the settings, so a
rerun does only what is missing. OUT/report.json, report.md (one table per domain, our column
beside the published numbers and beside other models measured by this harness, `--compare
LABEL=DIR`) and report.png (bars) are written at the end.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

from prorl_jax import rewards
from prorl_jax.data import prompts
from prorl_jax.data import suite as suite_lib
from prorl_jax.evaluation import export
from prorl_jax.evaluation.serving import ServedModel
from prorl_jax.evaluation.suite_report import (
  REFERENCES,
  SuiteError,
  build_report,
  load_compare,
  load_references,
  percent,
  write_json,
  write_report,
)
from prorl_jax.model import hf_weights
from prorl_jax.model.tokenizer import load_tokenizer
from prorl_jax.records import SamplingParams
from prorl_jax.trainer import scoring

# How the paper samples its evaluation (prorl-eval's defaults; DEFAULT_SAMPLES per domain).
PAPER = {"temperature": 0.6, "top_p": 0.95, "max_response_len": 32768, "max_prompt_len": 4096}
DEFAULT_SAMPLES = {"math": 16, "code": 16, "stem": 16, "instruction_following": 4, "logic": 4}


def model_identity(model_dir: str) -> list:
  """What names a model's weights for the cache: its files' names, sizes and mtimes."""
  return sorted(
    (
      n,
      os.path.getsize(os.path.join(model_dir, n)),
      int(os.path.getmtime(os.path.join(model_dir, n))),
    )
    for n in os.listdir(model_dir)
    if os.path.isfile(os.path.join(model_dir, n))
  )


def _fingerprint(*parts) -> str:
  return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _read_cache(path: str, key: str) -> dict | None:
  try:
    with open(path) as f:
      got = json.load(f)
  except (OSError, ValueError):
    return None
  return got if isinstance(got, dict) and got.get("key") == key else None


def fit_response_len(asked: int | None, context: int | None, cap: int | None) -> int:
  """The response budget: `asked`, refused in one line (SuiteError) when it passes the model's
  context (`max_position_embeddings`) or `cap` (the config's, for an engine it sizes); not
  asked, the paper's 32768 lowered to both."""
  limits = [(context, f"the model's context (max_position_embeddings {context})")] * bool(context)
  limits += [(cap, f"the config's rollout.max_response_len ({cap})")] * bool(cap)
  if asked is None:
    return min([PAPER["max_response_len"], *(n for n, _ in limits)])
  for n, what in limits:
    if asked > n:
      raise SuiteError(f"--max_response_len={asked} is over {what}; ask for at most {n}")
  return asked


def run_suite(
  start_workers,
  *,
  data_dir: str,
  checkpoint: str,
  out_dir: str,
  max_response_len: int | None = None,
  response_cap: int | None = None,
  samples: dict[str, int] | None = None,
  temperature: float = PAPER["temperature"],
  top_p: float = PAPER["top_p"],
  max_prompt_len: int = PAPER["max_prompt_len"],
  benchmarks: list[str] | None = None,
  references: str = REFERENCES,
  compare: list[str] | None = None,
  seed: int = 0,
  timeout_s: float = 3600.0,
  log=print,
) -> dict:
  """Evaluates every (selected) benchmark, caching each; writes and returns the report.

  `compare` holds LABEL=DIR items: reports of other models by this harness (`--out` of an
  earlier run), put beside ours as measured columns. `max_response_len` None: the paper's,
  fitted to the model's context and `response_cap` (what the engine's config sizes)."""

  manifest = suite_lib.read_manifest(data_dir)
  names = benchmarks or list(manifest["benchmarks"])
  unknown = [n for n in names if n not in manifest["benchmarks"]]
  if unknown:
    raise SuiteError(
      f"--benchmarks {unknown[0]}: not in {data_dir} (it has {', '.join(manifest['benchmarks'])})"
    )
  samples = dict(DEFAULT_SAMPLES, **(samples or {}))
  measured = load_compare(compare or [])
  os.makedirs(out_dir, exist_ok=True)
  try:
    model_dir, label = export.resolve_model(checkpoint, out_dir)
  except export.ExportError as e:
    raise SuiteError(str(e)) from None
  log(f"model: {label}" + ("" if label == model_dir else f" (as {model_dir})"))
  context = hf_weights.read_hf_config(model_dir).get("max_position_embeddings")
  max_response_len = fit_response_len(max_response_len, context, response_cap)
  log(f"responses: up to {max_response_len} tokens")
  tok = load_tokenizer(model_dir)
  settings = {
    "temperature": temperature,
    "top_p": top_p,
    "max_response_len": max_response_len,
    "max_prompt_len": max_prompt_len,
    "seed": int(seed),
  }
  ident = model_identity(model_dir)
  results, runner = {}, None
  try:
    for i, name in enumerate(names, 1):
      b = manifest["benchmarks"][name]
      n_samples = samples[b["domain"]]
      key = _fingerprint(ident, manifest["files"][b["file"]]["sha256"], n_samples, settings)
      cache = os.path.join(out_dir, "benchmarks", f"{name}.json")
      got = _read_cache(cache, key)
      if got is not None:
        results[name] = got
        log(f"[{i}/{len(names)}] {name}: cached, pass@1 {percent(got['summary']['pass@1'])}")
        continue
      src = prompts.JsonlSource(
        [os.path.join(data_dir, b["file"])], tok, max_prompt_len=max_prompt_len, seed=seed
      )
      items = src.items
      log(
        f"[{i}/{len(names)}] {name}: {len(items)} prompts x {n_samples} samples"
        + (
          f" ({src.dropped_too_long} over {max_prompt_len} prompt tokens left out)"
          if src.dropped_too_long
          else ""
        )
      )
      if runner is None:
        runner = ServedModel(model_dir, start_workers, os.path.join(out_dir, "workers"))
      t0 = time.time()
      got = scoring.collect(
        runner.ex,
        items,
        samples=n_samples,
        version=0,
        timeout_s=timeout_s,
        tag=f"suite-{name}",
        seed=seed,
        on_idle=runner.workers.check,
        sampling=SamplingParams(
          max_new_tokens=max_response_len, temperature=temperature, top_p=top_p
        ),
      )
      cont = rewards.continuous(items[0].data_source)
      summary = scoring.summarize(got["scores"], got["failed"], continuous=cont, ks=[])
      summary.update(
        metric="mean score" if cont else "pass@1",
        dropped_too_long=src.dropped_too_long,
        response_tokens_mean=float(got["lengths"].mean()),
        truncated=float((got["lengths"] >= max_response_len).mean()),
        seconds=round(time.time() - t0, 1),
      )
      if name.startswith("reasoning_gym"):
        summary["tasks"] = _per_task(items, got, cont)
      results[name] = {
        "key": key,
        "benchmark": name,
        "domain": b["domain"],
        "summary": summary,
        "uids": [it.uid for it in items],
        "scores": got["scores"].tolist(),
        "verifier_failed": got["failed"].astype(int).tolist(),
        "lengths": got["lengths"].tolist(),
      }
      write_json(cache, results[name])
      log(
        f"[{i}/{len(names)}] {name}: {summary['metric']} {percent(summary['pass@1'])} "
        f"({summary['verifier_failures']} verifier failures, {summary['seconds']:.0f}s)"
      )
  finally:
    if runner is not None:
      runner.close()
  report = build_report(
    results,
    manifest,
    label=label,
    settings=settings,
    samples=samples,
    references=load_references(references),
    measured=measured,
  )
  write_report(report, out_dir)
  return report


def _per_task(items: list[dict], got: dict, cont: bool) -> dict:
  by_task: dict[str, list[int]] = {}
  for i, it in enumerate(items):
    by_task.setdefault(str(it.extra.get("task", "?")), []).append(i)
  return {
    t: scoring.summarize(got["scores"][idx], got["failed"][idx], continuous=cont, ks=[])["pass@1"]
    for t, idx in sorted(by_task.items())
  }
