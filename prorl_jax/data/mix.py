"""The ProRL training mix: each source's rows converted to verl-schema rows routed to their
verifier, deduplicated, checked against their own references, split and written as Parquet with
a manifest (`prepare`). `python -m prorl_jax.cli.prepare --mix=prorl` is its command; the evaluation
suite (`prorl_jax.data.suite`) reuses its readers, converters and writers.
"""

from __future__ import annotations

import collections
import hashlib
import json
import math
import os
import re
import time
from importlib.metadata import version

import numpy as np

from prorl_jax import rewards
from prorl_jax.data import audit
from prorl_jax.data.hub import Malformed, Source, load_source
from prorl_jax.data.ifeval_ids import from_ifeval
from prorl_jax.data.prompts import parse_row
from prorl_jax.data.solution_answers import scp_answer
from prorl_jax.rewards import code, mcq, puzzles

BOXED_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def user_prompt(text: str) -> list[dict]:
  return [{"role": "user", "content": text}]


def text_field(row: dict, key: str) -> str:
  v = row.get(key)
  if not isinstance(v, str) or not v.strip():
    raise Malformed(f"column {key!r} is empty or not text")
  return v.strip()


def verl_row(prompt: list[dict], data_source: str, truth: str, domain: str, extra: dict) -> dict:
  """A verl-schema row; raises KeyError when no verifier takes `data_source`."""
  rewards.verifier_name(data_source)  # every row is routed to a verifier (KeyError otherwise)
  return {
    "data_source": data_source,
    "prompt": prompt,
    "ability": domain,
    "reward_model": {"style": "rule", "ground_truth": truth},
    "extra_info": extra,
  }


def convert_deepscaler(row: dict) -> dict:
  """A DeepScaleR row (`problem`, `answer`) as a boxed-answer math row."""
  problem, answer = text_field(row, "problem"), row.get("answer")
  if answer is None or not str(answer).strip():
    raise Malformed("column 'answer' is empty")
  if isinstance(answer, float) and not math.isfinite(answer):
    raise Malformed("column 'answer' is not a finite number")
  return verl_row(
    user_prompt(f"{problem} {BOXED_INSTRUCTION}"), "deepscaler", str(answer).strip(), "math", {}
  )


CODE_SOURCES = ("codecontests", "apps", "taco", "codeforces")


def convert_eurus_code(row: dict) -> dict:
  """An Eurus-2-RL code row (`prompt`, `data_source`, `reward_model.ground_truth` test cases) as
  a code row for the sandboxed verifier; `Malformed` names the column that has no usable tests."""
  if row.get("ability") != "code":
    raise Malformed("column 'ability' is not code")
  if (ds := row.get("data_source")) not in CODE_SOURCES:
    raise Malformed(f"column 'data_source' {ds!r} has no code verifier")
  prompt = row.get("prompt")
  if not (
    isinstance(prompt, list)
    and prompt
    and all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in prompt)
  ):
    raise Malformed("column 'prompt' is not a list of chat messages")
  rm = row.get("reward_model")
  if not isinstance(rm, dict):
    raise Malformed("column 'reward_model' is not an object")
  truth = rm.get("ground_truth")
  try:
    tests = json.loads(truth) if isinstance(truth, str) else truth
  except ValueError:
    raise Malformed("column 'reward_model.ground_truth' (test cases) is not JSON") from None
  if not (
    isinstance(tests, dict)
    and isinstance(tests.get("inputs"), list)
    and isinstance(tests.get("outputs"), list)
    and tests["inputs"]
    and len(tests["inputs"]) == len(tests["outputs"])
  ):
    raise Malformed(
      "column 'reward_model.ground_truth' needs non-empty inputs and outputs of one length"
    )
  messages = [{"role": m.get("role", "user"), "content": m["content"]} for m in prompt]
  statement = "\n".join(m["content"] for m in messages if m["role"] != "system")
  if unusable := code.unusable_tests(tests, statement):
    raise Malformed(f"column 'reward_model.ground_truth': {unusable}")
  return verl_row(messages, ds, json.dumps(tests), "code", {})


def convert_scp(row: dict) -> dict:
  """An SCP-116K row (`problem`, `matched_solution`) as a STEM row whose reference is the final
  answer the solution states (`solution_answers.scp_answer`, the rule recorded in extra_info);
  `Malformed` when the solution states none."""
  problem = text_field(row, "problem")
  got = scp_answer(text_field(row, "matched_solution"))
  if got is None:
    raise Malformed(
      "column 'matched_solution' has no final answer (no \\boxed{}, 'the answer is', "
      "final '= value' or short last line)"
    )
  if row.get("is_o1_solution_same_with_matched_solution") is False:
    raise Malformed("column 'is_o1_solution_same_with_matched_solution' is false")
  if unusable := mcq.reference_problem(answer := got[0]):
    raise Malformed(f"column 'matched_solution': the final answer's {unusable}")
  return verl_row(
    user_prompt(f"{problem} {BOXED_INSTRUCTION}"),
    "scp",
    answer,
    "stem",
    {"subject": str(row.get("domain") or ""), "answer_from": got[1]},
  )


def ifeval_instructions(
  ids: list, kwargs: list, where: str = "kwargs", ids_where: str = "instruction_id_list"
) -> list[dict]:
  """IFEval ids + kwargs (columns `ids_where`, `where`) -> instructions, or Malformed."""
  try:
    return from_ifeval(ids, kwargs)
  except ValueError as e:
    column = ids_where if str(e).startswith(("no instruction ids", "unsupported")) else where
    raise Malformed(f"column {column!r}: {e}") from None


def convert_nemotron_if(row: dict) -> dict:
  """A Nemotron instruction-following row (`input`, `args` of the IFEval instructions) as an
  instruction-following row; `Malformed` for an empty prompt or an instruction the verifier does
  not implement."""
  text = row.get("input")
  if isinstance(text, list):  # chat messages: the last user turn
    users = [m.get("content") for m in text if isinstance(m, dict) and m.get("role") == "user"]
    text = users[-1] if users else None
  if not isinstance(text, str) or not text.strip():
    raise Malformed("column 'input' is empty or has no user turn")
  args = row.get("args")
  if isinstance(args, str):
    try:
      args = json.loads(args)
    except ValueError:
      raise Malformed("column 'args' is not JSON") from None
  if not isinstance(args, dict):
    raise Malformed("column 'args' is not an object")
  if "instruction_id_list" not in args:
    raise Malformed("column 'args' lacks 'instruction_id_list'")
  # the RL configuration's rows keep the arguments under instruction_kwargs (IFEval: kwargs)
  key = "instruction_kwargs" if "instruction_kwargs" in args else "kwargs"
  if key not in args:
    raise Malformed("column 'args' lacks 'instruction_kwargs'")
  instructions = ifeval_instructions(
    args["instruction_id_list"], args[key], f"args.{key}", "args.instruction_id_list"
  )
  return verl_row(
    user_prompt(text.strip()),
    "llama_nemotron_if",
    "",
    "instruction_following",
    {"instructions": instructions},
  )


SOURCES = {
  s.name: s
  for s in (
    Source(
      "deepscaler",
      "math",
      "agentica-org/DeepScaleR-Preview-Dataset",
      ("problem", "answer"),
      convert_deepscaler,
      license="MIT",
    ),
    Source(
      "eurus_code",
      "code",
      "PRIME-RL/Eurus-2-RL-Data",
      ("data_source", "prompt", "ability", "reward_model"),
      convert_eurus_code,
      license="MIT",
    ),
    Source(
      "scp",
      "stem",
      "EricLu/SCP-116K",
      ("domain", "problem", "matched_solution"),
      convert_scp,
      license="CC BY-NC-SA 4.0 (non-commercial)",
    ),
    Source(
      "nemotron_if",
      "instruction_following",
      "nvidia/Llama-Nemotron-Post-Training-Dataset",
      ("input", "args"),
      convert_nemotron_if,
      config="RL",
      split="instruction_following",
      license="CC BY 4.0",
    ),
  )
}

PRORL_MIX = {
  "math": 40_000,
  "code": 24_000,
  "stem": 25_000,
  "logic": 37_000,
  "instruction_following": 10_000,
}
DOMAIN_SOURCE = {
  "math": "deepscaler",
  "code": "eurus_code",
  "stem": "scp",
  "instruction_following": "nemotron_if",
  "logic": "reasoning_gym",
}
# Reasoning Gym tasks of the logic domain (the out-of-distribution evaluation tasks acre, boxnet
# and game_of_life_halting are left out on purpose).
RG_TASKS = puzzles.TRAINING_TASKS


def check_references(rows: list[dict], pool) -> list[str | None]:
  """For verl rows: None where the row's reference earns full reward (or it has none to
  check), else why the row is dropped (`data.audit.check_references`)."""
  return audit.check_references([parse_row(r, "prepare", i) for i, r in enumerate(rows)], pool)


def normalise_prompt(prompt: list[dict]) -> str:
  text = " ".join(m["content"] for m in prompt if m.get("role") != "system")
  return re.sub(r"\s+", " ", text).strip().casefold()


def reasoning_gym_rows(count: int, tasks: tuple[str, ...], seed: int) -> list[dict]:
  """`count` Reasoning Gym rows spread evenly over `tasks` (task k seeded with seed + k)."""
  rows = []
  per = [count // len(tasks) + (i < count % len(tasks)) for i in range(len(tasks))]
  for k, (task, n) in enumerate(zip(tasks, per)):
    if n:
      for r in puzzles.make_items(task, seed=seed + k, size=n):
        r["extra_info"].pop("entry")  # the scorer regenerates it from task/seed/size/index
        r["ability"] = "logic"
        rows.append(r)
  return rows


def write_parquet(rows: list[dict], path: str) -> dict:
  """verl-schema rows as Parquet: `reward_model` and `extra_info` as structs (mappings, as
  verl's own preprocessing writes them and its dataset reads them); a struct's keys are the
  union over the file's rows (absent ones null: `data.parse_row` drops them). Should pyarrow
  find no common type for a key, `extra_info` is written as JSON text instead (read as well)."""
  import pyarrow as pa  # lazy: pyarrow only for Parquet files
  import pyarrow.parquet as pq

  os.makedirs(os.path.dirname(path), exist_ok=True)
  try:
    table = pa.Table.from_pylist(rows)
  except (pa.ArrowInvalid, pa.ArrowTypeError):
    flat = [dict(r, extra_info=json.dumps(r["extra_info"], sort_keys=True)) for r in rows]
    table = pa.Table.from_pylist(flat)
  pq.write_table(table, path)
  with open(path, "rb") as f:
    sha = hashlib.sha256(f.read()).hexdigest()
  return {"rows": len(rows), "sha256": sha}


def prepare(
  out: str,
  *,
  counts: dict[str, int],
  local: dict[str, str],
  revisions: dict[str, str],
  val_per_domain: int,
  seed: int,
  rg_tasks: tuple[str, ...] = RG_TASKS,
  log=print,
  check_pool=None,
) -> dict:
  """Builds the mix in `out`; returns the manifest (also written to out/manifest.json). With
  `check_pool` (a VerifierPool), every kept row's own reference answer is scored through its
  verifier first and a row whose reference does not earn full reward is dropped, counted."""
  rng = np.random.RandomState(seed)
  seen: set[str] = set()
  manifest = {
    "mix": "prorl",
    "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    "seed": seed,
    "sources": {},
    "files": {},
    "train_files": [],
    "weights": [],
    "val_files": [],
  }
  val_rows = []
  for domain, want in counts.items():
    name = DOMAIN_SOURCE[domain]
    t0 = time.time()
    info = collections.OrderedDict()
    if name == "reasoning_gym":
      total = want + val_per_domain
      rows = reasoning_gym_rows(total, rg_tasks, seed)
      info.update(
        dataset="reasoning_gym (generated)",
        revision=rg_version(),
        tasks=list(rg_tasks),
        license="Apache-2.0",
      )
      converted, bad = rows, collections.Counter()
    else:
      converted, bad, more = load_source(SOURCES[name], local, revisions)
      info.update(more)
    order = list(rng.permutation(len(converted)))
    kept, dups, checked, dropped = [], 0, 0, collections.Counter()
    while order and len(kept) < want + val_per_domain:  # in batches, until enough rows pass
      batch = []
      while order and len(batch) < want + val_per_domain - len(kept):
        row = converted[order.pop(0)]
        key = normalise_prompt(row["prompt"])
        if key in seen:
          dups += 1
          continue
        seen.add(key)
        batch.append(row)
      verdicts = check_references(batch, check_pool) if check_pool else [None] * len(batch)
      checked += len(batch) if check_pool else 0
      for row, why in zip(batch, verdicts):
        if why:
          dropped[why] += 1
        else:
          kept.append(row)
    bad.update(dropped)
    info["reference_check"] = (
      {"checked": checked, "dropped": dict(dropped.most_common())} if check_pool else "skipped"
    )
    val, train = kept[:val_per_domain], kept[val_per_domain:]
    for r in train + val:
      r["extra_info"] = dict(r["extra_info"], domain=domain)
    methods = collections.Counter(
      r["extra_info"]["answer_from"] for r in converted if "answer_from" in r["extra_info"]
    )
    if methods:  # how the reference answers were found (SCP-116K: from free solution text)
      info["answer_from"] = dict(methods.most_common())
    info.update(
      converted=len(converted),
      malformed=dict(bad.most_common()),
      duplicates=dups,
      train=len(train),
      val=len(val),
      requested=want,
    )
    if len(train) < want:
      info["short_by"] = want - len(train)
    rel = f"train/{domain}.parquet"
    manifest["files"][rel] = write_parquet(train, os.path.join(out, rel))
    manifest["train_files"].append(rel)
    manifest["weights"].append(len(train))
    manifest["sources"][domain] = info
    val_rows += val
    refs = (
      f"references checked: {checked}, {sum(dropped.values())} dropped"
      + (f" ({top_reasons(dropped)})" if dropped else "")
      if check_pool
      else "references not checked"
    )
    log(
      f"{domain}: {len(train)} train + {len(val)} val from {info['dataset']} "
      f"({sum(bad.values())} malformed{': ' + top_reasons(bad) if bad else ''}; {dups} duplicates; "
      f"{refs}; {time.time() - t0:.0f}s)"
    )
  manifest["files"]["val.parquet"] = write_parquet(val_rows, os.path.join(out, "val.parquet"))
  manifest["val_files"].append("val.parquet")
  with open(os.path.join(out, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=1)
  return manifest


def top_reasons(bad: collections.Counter) -> str:
  return ", ".join(f"{n} {reason}" for reason, n in bad.most_common(3))


def rg_version() -> str:
  try:
    return f"reasoning-gym=={version('reasoning-gym')}"
  except Exception:  # noqa: BLE001
    return "reasoning-gym"
