"""`python -m prorl_jax.cli.prepare --mix=prorl --out=DIR`: the ProRL training mix as verl-schema
Parquet files that `data.train_files` reads (`--suite=prorl-eval`: the evaluation suite,
`prorl_jax.data.suite`).

Five domains (default counts as in ProRL; `--count DOMAIN=N` changes one):

  math                   40,000  agentica-org/DeepScaleR-Preview-Dataset (problem, answer)
  code                   24,000  PRIME-RL/Eurus-2-RL-Data, its coding rows (verl-like already)
  stem                   25,000  EricLu/SCP-116K (domain, problem, matched_solution; the reference
                                 is matched_solution's last \\boxed{}; CC BY-NC-SA 4.0)
  logic                  37,000  Reasoning Gym, generated here (`--rg_tasks`, seeded)
  instruction_following  10,000  nvidia/Llama-Nemotron-Post-Training-Dataset, RL /
                                 instruction_following (input, args: IFEval instruction ids)

Downloads go through Hugging Face `datasets` (`--revision NAME=SHA` pins one; the commit used is
recorded either way); `--source NAME=PATH` reads a local copy of the dataset's repository (`hf
download --repo-type dataset ID --local-dir PATH`, read as the Hub is) or a JSONL / JSON /
Parquet / CSV file or directory of them instead (offline machines, tests). Every row is
converted or counted as malformed with its reason; a source missing a column stops with one line
naming the dataset, revision and column. Prompts are deduplicated across the mix (case and
whitespace folded); `--val` rows per domain form `val.parquet`. `manifest.json` records
per-source counts, dataset ids, revisions, licenses, and each output file's rows and sha256;
`data.prepared=DIR` trains on it.
"""

from __future__ import annotations

import collections
import os
import sys

from absl import flags

from prorl_jax.cli import errors
from prorl_jax.cli.flags import USAGE_EXIT, parse
from prorl_jax.data import suite as suite_lib
from prorl_jax.data import suite_rows
from prorl_jax.data.hub import Malformed, PrepareError  # noqa: F401 - Malformed: the command's API
from prorl_jax.data.mix import (  # noqa: F401 - the mix's names, as this command's users knew them
  BOXED_INSTRUCTION,
  PRORL_MIX,
  RG_TASKS,
  SOURCES,
  ifeval_instructions,
  normalise_prompt,
  prepare,
  scp_answer,
  top_reasons,
)
from prorl_jax.rewards import puzzles
from prorl_jax.rewards.pool import VerifierPool


def _pairs(items: list[str], flag: str) -> dict[str, str]:
  out = {}
  for item in items:
    if "=" not in item:
      raise PrepareError(f"{flag} takes NAME=VALUE, got {item!r}")
    k, v = item.split("=", 1)
    out[k.strip()] = v.strip()
  return out


FLAGS = flags.FlagValues()
_F = dict(flag_values=FLAGS)
flags.DEFINE_enum("mix", None, ["prorl"], "the training mix to build", **_F)
flags.DEFINE_enum("suite", None, [suite_lib.SUITE], "the evaluation suite to build", **_F)
flags.mark_flags_as_mutual_exclusive(["mix", "suite"], required=True, flag_values=FLAGS)
flags.DEFINE_string("out", None, "output directory", **_F)
flags.mark_flag_as_required("out", flag_values=FLAGS)
flags.DEFINE_multi_string(
  "source",
  [],
  "NAME=PATH: read a source locally, from a copy of its Hub repository or from "
  f"JSONL/JSON/Parquet/CSV files (mix: {', '.join(SOURCES)}; suite: "
  f"{', '.join(suite_lib.SOURCES)})",
  **_F,
)
flags.DEFINE_multi_string("revision", [], "NAME=SHA: pin a dataset", **_F)
flags.DEFINE_multi_string(
  "count", [], f"mix: DOMAIN=N training rows ({', '.join(PRORL_MIX)}; 0 drops one)", **_F
)
flags.DEFINE_integer("val", 100, "mix: validation rows per domain", **_F)
flags.DEFINE_integer("seed", 0, "the sampling seed", **_F)
flags.DEFINE_string("rg_tasks", ",".join(RG_TASKS), "Reasoning Gym tasks", **_F)
flags.DEFINE_bool(
  "check_references",
  True,
  "score every row's own reference answer before writing it (--nocheck_references skips it)",
  **_F,
)
flags.DEFINE_bool(
  "allow_short", False, "mix: exit 0 even when a domain gets fewer rows than its count", **_F
)
flags.DEFINE_string(
  "benchmarks", ",".join(suite_lib.BENCHMARKS), "suite: the benchmarks to build", **_F
)
flags.DEFINE_integer("rg_per_task", 100, "suite: held-out Reasoning Gym items per task", **_F)
flags.DEFINE_string(
  "lcb_from",
  suite_rows.LCB_WINDOW[0],
  "suite: LiveCodeBench problems dated on or after (YYYY-MM-DD)",
  **_F,
)
flags.DEFINE_string("lcb_to", suite_rows.LCB_WINDOW[1], "suite: ... and before (YYYY-MM-DD)", **_F)


def main(argv=None) -> int:
  """The command line of `prorl-prepare`: the training mix (`--mix`) or the evaluation suite
  (`--suite`) into `--out`; returns the exit status (1 when a domain comes out short, 2 for a
  user error)."""
  ok = parse(
    FLAGS,
    argv,
    prog="python -m prorl_jax.cli.prepare",
    about="Builds the ProRL training mix (--mix=prorl) or evaluation suite "
    "(--suite=prorl-eval) as verl-schema Parquet.",
  )
  if ok is None:
    return USAGE_EXIT
  return errors.exit_status(lambda: _checked(FLAGS), PrepareError)


def _checked(args) -> int:
  known = suite_lib.SOURCES if args.suite else SOURCES
  local = _pairs(args.source, "--source")
  unknown = set(local) - set(known)
  if unknown:
    raise PrepareError(
      f"--source {sorted(unknown)[0]}: unknown source; the sources are {', '.join(known)}"
    )
  tasks = tuple(t for t in args.rg_tasks.split(",") if t)
  try:
    puzzles.check_tasks(tasks)
  except ValueError as e:
    raise PrepareError(f"--rg_tasks: {e}") from None
  revisions = _pairs(args.revision, "--revision")
  check_pool = None
  if args.check_references:
    check_pool = VerifierPool(processes=max(1, min(os.cpu_count() or 1, 16)))
  try:
    return _run(args, local, revisions, tasks, check_pool)
  finally:
    if check_pool is not None:
      check_pool.close()


def _run(args, local, revisions, tasks, check_pool) -> int:
  if args.suite:
    if not (suite_lib.is_valid_date(args.lcb_from) and suite_lib.is_valid_date(args.lcb_to)):
      raise PrepareError("--lcb_from / --lcb_to take dates as YYYY-MM-DD")
    m = suite_lib.prepare_suite(
      args.out,
      local=local,
      revisions=revisions,
      rg_tasks=tasks,
      benchmarks=tuple(b for b in args.benchmarks.split(",") if b),
      rg_per_task=args.rg_per_task,
      lcb_window=(args.lcb_from, args.lcb_to),
      check_pool=check_pool,
    )
    print(
      f"wrote {args.out}: {len(m['benchmarks'])} benchmarks; evaluate with python -m "
      f"prorl_jax.cli.eval --suite={args.suite} --data={args.out} --checkpoint=MODEL"
    )
    return 0
  counts = dict(PRORL_MIX)
  for k, v in _pairs(args.count, "--count").items():
    if k not in counts or not v.isdigit():
      raise PrepareError(
        f"--count {k}={v}: want DOMAIN=N with DOMAIN one of {', '.join(PRORL_MIX)}"
      )
    counts[k] = int(v)
  counts = {k: v for k, v in counts.items() if v}
  manifest = prepare(
    args.out,
    counts=counts,
    local=local,
    revisions=revisions,
    val_per_domain=args.val,
    seed=args.seed,
    rg_tasks=tasks,
    check_pool=check_pool,
  )
  print(
    f"wrote {args.out}: {sum(manifest['weights'])} training rows in "
    f"{len(manifest['train_files'])} files, {manifest['files']['val.parquet']['rows']} "
    f"validation rows; train with --config.data.prepared={args.out}"
  )
  short = {d: i for d, i in manifest["sources"].items() if i.get("short_by")}
  for domain, i in short.items():  # a domain that comes out short is loud
    why = top_reasons(collections.Counter(i["malformed"])) or "the source has no more rows"
    print(
      f"{'warning' if args.allow_short else 'error'}: {domain} is short by {i['short_by']} of "
      f"{i['requested']} rows ({i['converted']} converted, {i['duplicates']} duplicates; "
      f"malformed: {why})",
      file=sys.stderr,
    )
  if short and not args.allow_short:
    print(
      f"error: {len(short)} domain(s) short: fix the sources, lower --count, or pass "
      "--allow_short to train on what there is",
      file=sys.stderr,
    )
    return 3
  return 0


if __name__ == "__main__":
  sys.exit(main())
