"""`python -m prorl_jax.cli.prepare --suite=prorl-eval --out=DIR`: the ProRL evaluation suite, one
verl-schema Parquet file per benchmark, plus `manifest.json` (dataset ids, revisions, counts,
malformed rows by reason, sha256 of every file).

  benchmark            domain                 source (Hugging Face dataset id)
  aime24               math                   HuggingFaceH4/aime_2024
  aime25               math                   math-ai/aime25
  amc                  math                   AI-MO/aimo-validation-amc
  math500              math                   HuggingFaceH4/MATH-500
  minerva              math                   math-ai/minervamath
  olympiadbench        math                   Hothan/OlympiadBench (OE_TO_maths_en_COMP)
  apps, codecontests,  code                   PRIME-RL/Eurus-2-RL-Data, validation split, by
  codeforces, taco                            data_source
  humanevalplus        code                   evalplus/humanevalplus (its inputs/results table
                                              becomes function-call tests)
  livecodebench        code                   livecodebench/code_generation_lite (its
                                              test*.jsonl files through huggingface_hub:
                                              `datasets` 4 does not run its loading script),
                                              problems dated in [--lcb_from, --lcb_to)
  gpqa_diamond         stem                   Idavidrein/gpqa (gpqa_diamond; gated: accept its
                                              terms and log in first), choices shuffled per
                                              question with a fixed seed
  ifeval               instruction_following  google/IFEval
  reasoning_gym        logic                  Reasoning Gym, 100 held-out items per training task
  reasoning_gym_ood    logic                  Reasoning Gym acre, boxnet, game_of_life_halting

Every row carries `extra_info.benchmark`; `python -m prorl_jax.cli.eval --suite=prorl-eval` reads
the manifest. A row that cannot be scored (an IFEval instruction the verifier does not know, a
test table that is not data) is counted by reason in the manifest and in the log, never dropped
in silence.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import time

import numpy as np

from prorl_jax.data import mix as P
from prorl_jax.data.hub import PrepareError, Source
from prorl_jax.data.prompts import DataError, JsonlSource
from prorl_jax.data.suite_rows import (
  LCB_WINDOW,
  convert_gpqa,
  convert_humanevalplus,
  convert_ifeval,
  convert_livecodebench,
  convert_prime_val,
  math_converter,
)

SUITE = "prorl-eval"
RG_HELDOUT_SEED = 1_000_003  # Reasoning Gym seeds of the held-out items (training uses 0..)
RG_OOD_TASKS = ("acre", "boxnet", "game_of_life_halting")


SOURCES = {
  s.name: s
  for s in (
    Source(
      "aime24",
      "math",
      "HuggingFaceH4/aime_2024",
      ("problem", "answer"),
      math_converter("problem", "answer", "aime"),
      license="MIT",
    ),
    Source(
      "aime25",
      "math",
      "math-ai/aime25",
      ("problem", "answer"),
      math_converter("problem", "answer", "aime"),
      split="test",
    ),
    Source(
      "amc",
      "math",
      "AI-MO/aimo-validation-amc",
      ("problem", "answer"),
      math_converter("problem", "answer", "amc"),
      license="Apache-2.0",
    ),
    Source(
      "math500",
      "math",
      "HuggingFaceH4/MATH-500",
      ("problem", "answer"),
      math_converter("problem", "answer", "math"),
      split="test",
      license="MIT",
    ),
    Source(
      "minerva",
      "math",
      "math-ai/minervamath",
      ("question", "answer"),
      math_converter("question", "answer", "math"),
      split="test",
    ),
    Source(
      "olympiadbench",
      "math",
      "Hothan/OlympiadBench",
      ("question", "final_answer"),
      math_converter("question", "final_answer", "math"),
      config="OE_TO_maths_en_COMP",
      license="Apache-2.0",
    ),
    Source(
      "prime_val",
      "code",
      "PRIME-RL/Eurus-2-RL-Data",
      ("data_source", "prompt", "ability", "reward_model"),
      convert_prime_val,
      split="validation",
      license="MIT",
    ),
    Source(
      "humanevalplus",
      "code",
      "evalplus/humanevalplus",
      ("task_id", "prompt", "entry_point", "test"),
      convert_humanevalplus,
      split="test",
      license="Apache-2.0",
    ),
    Source(
      "livecodebench",
      "code",
      "livecodebench/code_generation_lite",
      ("question_content", "public_test_cases", "private_test_cases", "metadata", "contest_date"),
      convert_livecodebench,
      split="test",
      files=("test*.jsonl",),  # its loading script is not run: `datasets` 4 refuses scripts
      license="CC BY 4.0",
    ),
    Source(
      "gpqa_diamond",
      "stem",
      "Idavidrein/gpqa",
      (
        "Question",
        "Correct Answer",
        "Incorrect Answer 1",
        "Incorrect Answer 2",
        "Incorrect Answer 3",
      ),
      convert_gpqa,
      config="gpqa_diamond",
      license="CC BY 4.0",
    ),
    Source(
      "ifeval",
      "instruction_following",
      "google/IFEval",
      ("prompt", "instruction_id_list", "kwargs"),
      convert_ifeval,
      license="Apache-2.0",
    ),
  )
}


@dataclasses.dataclass(frozen=True)
class Benchmark:
  name: str
  domain: str
  source: str  # a SOURCES key, or "reasoning_gym"
  data_source: str | None = None  # keep only the source's rows of this data_source


BENCHMARKS = {
  b.name: b
  for b in (
    Benchmark("aime24", "math", "aime24"),
    Benchmark("aime25", "math", "aime25"),
    Benchmark("amc", "math", "amc"),
    Benchmark("math500", "math", "math500"),
    Benchmark("minerva", "math", "minerva"),
    Benchmark("olympiadbench", "math", "olympiadbench"),
    Benchmark("apps", "code", "prime_val", "apps"),
    Benchmark("codecontests", "code", "prime_val", "codecontests"),
    Benchmark("codeforces", "code", "prime_val", "codeforces"),
    Benchmark("taco", "code", "prime_val", "taco"),
    Benchmark("humanevalplus", "code", "humanevalplus"),
    Benchmark("livecodebench", "code", "livecodebench"),
    Benchmark("gpqa_diamond", "stem", "gpqa_diamond"),
    Benchmark("ifeval", "instruction_following", "ifeval"),
    Benchmark("reasoning_gym", "logic", "reasoning_gym"),
    Benchmark("reasoning_gym_ood", "logic", "reasoning_gym_ood"),
  )
}
DOMAINS = ("math", "code", "stem", "instruction_following", "logic")


def prepare_suite(
  out: str,
  *,
  local: dict[str, str],
  revisions: dict[str, str],
  benchmarks: tuple[str, ...] = tuple(BENCHMARKS),
  rg_per_task: int = 100,
  rg_tasks: tuple[str, ...] = P.RG_TASKS,
  lcb_window: tuple[str, str] = LCB_WINDOW,
  log=print,
  check_pool=None,
) -> dict:
  """Writes one Parquet file per benchmark and out/manifest.json; returns the manifest. With
  `check_pool`, a row whose own reference does not earn full reward is dropped and counted
  (`benchmarks.NAME.reference_check`)."""
  unknown = [b for b in benchmarks if b not in BENCHMARKS]
  if unknown:
    raise PrepareError(
      f"--benchmarks {unknown[0]}: unknown; the suite's benchmarks are {', '.join(BENCHMARKS)}"
    )
  manifest = {
    "suite": SUITE,
    "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    "benchmarks": {},
    "sources": {},
    "files": {},
  }
  loaded: dict[str, tuple[list[dict], dict]] = {}
  for name in benchmarks:
    b = BENCHMARKS[name]
    t0 = time.time()
    if b.source.startswith("reasoning_gym"):
      tasks = RG_OOD_TASKS if b.source == "reasoning_gym_ood" else rg_tasks
      rows = P.reasoning_gym_rows(rg_per_task * len(tasks), tasks, RG_HELDOUT_SEED)
      manifest["sources"][b.source] = {
        "dataset": "reasoning_gym (generated)",
        "revision": P.rg_version(),
        "tasks": list(tasks),
        "per_task": rg_per_task,
        "seed": RG_HELDOUT_SEED,
      }
    else:
      if b.source not in loaded:
        src = SOURCES[b.source]
        if b.source == "livecodebench":
          src = dataclasses.replace(src, convert=lambda r: convert_livecodebench(r, lcb_window))
        converted, bad, info = P.load_source(src, local, revisions)
        info.update(converted=len(converted), malformed=dict(bad.most_common()))
        if b.source == "livecodebench":
          info["window"] = list(lcb_window)
        manifest["sources"][b.source] = info
        loaded[b.source] = converted, info
        if bad:
          log(f"{b.source}: {sum(bad.values())} rows not usable: {P.top_reasons(bad)}")
      rows, info = loaded[b.source]
      if b.data_source:
        rows = [r for r in rows if r["data_source"] == b.data_source]
    rows = [
      dict(r, ability=b.domain, extra_info=dict(r["extra_info"], benchmark=name)) for r in rows
    ]
    check = "skipped"
    if check_pool is not None:
      verdicts = P.check_references(rows, check_pool)
      dropped = collections.Counter(v for v in verdicts if v)
      rows = [r for r, v in zip(rows, verdicts) if not v]
      check = {"checked": len(verdicts), "dropped": dict(dropped.most_common())}
      if dropped:
        log(
          f"{name}: {sum(dropped.values())} rows dropped by the reference check: "
          f"{P.top_reasons(dropped)}"
        )
    if not rows:
      raise PrepareError(
        f"{name}: no usable rows from {b.source} (see the counts above); "
        "check --source / --revision"
      )
    rel = f"{name}.parquet"
    manifest["files"][rel] = P.write_parquet(rows, os.path.join(out, rel))
    manifest["benchmarks"][name] = {
      "domain": b.domain,
      "file": rel,
      "rows": len(rows),
      "source": b.source,
      "reference_check": check,
    }
    log(f"{name}: {len(rows)} prompts ({time.time() - t0:.0f}s)")
  with open(os.path.join(out, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=1)
  return manifest


def read_manifest(directory: str) -> dict:
  """The suite manifest of a `prepare --suite` output; one line naming the fix otherwise."""
  path = os.path.join(directory, "manifest.json")
  try:
    with open(path) as f:
      m = json.load(f)
    benches = m["benchmarks"]
    assert m.get("suite") == SUITE and isinstance(benches, dict)
  except (OSError, ValueError, KeyError, AssertionError) as e:
    raise PrepareError(
      f"{directory}: not an evaluation suite ({type(e).__name__}: {e}); build "
      f"it with python -m prorl_jax.cli.prepare --suite={SUITE} --out="
      f"{directory}"
    ) from None
  for name, b in benches.items():
    if not os.path.isfile(os.path.join(directory, b["file"])):
      raise PrepareError(
        f"{directory}: {b['file']} of benchmark {name} is missing; rerun prepare --suite"
      )
  return m


def validation_items(
  tok,
  directory: str,
  specs: list[str],
  *,
  max_prompts: int,
  max_prompt_len: int,
  seed: int,
  routing=None,
  use_chat_template: bool = True,
) -> tuple[list[dict], set]:
  """(items, verifier names) of the in-loop validation blend: each spec is a benchmark of the
  suite at `directory`, or BENCHMARK/TASK for one Reasoning Gym task; at most `max_prompts`
  per spec (a seeded subset; 0 = all)."""

  try:
    m = read_manifest(directory)
  except PrepareError as e:
    raise DataError(f"data.val_suite: {e}") from None
  items, verifiers = [], set()
  for spec in specs:
    name, _, task = spec.partition("/")
    if name not in m["benchmarks"]:
      raise DataError(
        f"data.val_benchmarks: {name!r} is not in {directory} (it has {', '.join(m['benchmarks'])})"
      )
    src = JsonlSource(
      [os.path.join(directory, m["benchmarks"][name]["file"])],
      tok,
      max_prompt_len=max_prompt_len,
      seed=seed,
      routing=routing,
      use_chat_template=use_chat_template,
    )
    got = [it for it in src.items if not task or it.extra.get("task") == task]
    if not got:
      raise DataError(
        f"data.val_benchmarks: {spec!r} has no prompts within max_prompt_len={max_prompt_len}"
      )
    if max_prompts and len(got) > max_prompts:
      keep = np.sort(np.random.RandomState(seed).permutation(len(got))[:max_prompts])
      got = [got[i] for i in keep]
    items += [dataclasses.replace(it, extra=dict(it.extra, benchmark=spec)) for it in got]
    verifiers |= src.verifiers
  return items, verifiers


def is_valid_date(s: str) -> bool:
  return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", s))
