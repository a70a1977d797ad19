"""The verifier audit (`python -m prorl_jax.cli.audit --data=DIR`): what the rewards of a
prepared data directory pay for text that does not solve the task.

For a sample of real rows of every data source (Reasoning Gym: of every task), through the
rollout worker's own scoring path (`VerifierPool.score_many`), it scores:
- the reference answer (for code, a program that looks each test's input up in a table of the
  expected outputs): must earn 1.0, or the row is unusable;
- an honest wrong answer (another row's reference; for code a program that prints 0; for
  instruction following a plain reply on the prompt's topic that follows no instruction): the bar;
- the degenerate strategies a policy finds over thousands of steps: an empty and a blank
  answer, the question copied back, every candidate at once, a close float for an integer, the
  longest answer (the reference buried among every other row's), and veto attempts (text that
  blows up a parser: a tower of powers, JSON nested 100,000 deep, a returned 10**400);
- honest correct answers in the formats reasoning models write (`data.honest`);
- with `--attack`, the red team's classes (`data.attacks`), each against its own bar.
The command prints, per source, the reference's mean score, the honest wrong answer's, the share
of honest formats that earn full credit, and the best mean any strategy earns. It checks both
directions and exits 1 when a strategy or attack class earns more than its bar, an empty answer
earns anything, an honest wrong answer earns as much as the reference, a strategy gets its
response marked a verifier failure (a veto of its group), a reference earns less than 1.0, or an
honest format earns less than 1.0. `--json=FILE` writes the whole table.
"""

from __future__ import annotations

import collections
import json
import os
import random
import re

from prorl_jax import rewards
from prorl_jax.data import attacks, domains
from prorl_jax.data.prompts import DataError, parse_row, prepared_files, read_rows
from prorl_jax.rewards.pool import VerifierPool

STRATEGIES = (
  "empty",
  "blank",
  "copy_question",
  "every_candidate",
  "float_for_int",
  "longest",
  "veto",
)


def data_files(directory: str) -> list[str]:
  """The Parquet/JSONL files of a `prepare --mix` (train + val) or `prepare --suite` output."""
  if not os.path.isfile(os.path.join(directory, "manifest.json")):
    raise DataError(f"--data={directory!r}: no manifest.json; build it with prorl_jax.cli.prepare")
  with open(os.path.join(directory, "manifest.json")) as f:
    m = json.load(f)
  if "benchmarks" in m:
    return [os.path.join(directory, b["file"]) for b in m["benchmarks"].values()]
  train, _, val = prepared_files(directory)
  return train + val


def _key(row: dict) -> str:
  task = row["extra"].get("task")
  return (
    f"{row['data_source']}/{task}" if row["data_source"] == "reasoning_gym" else row["data_source"]
  )


def sample_rows(files: list[str], per_source: int, seed: int) -> dict[str, list[dict]]:
  """Up to `per_source` parsed rows of each source (reasoning_gym: each task), seeded."""
  by = collections.defaultdict(list)
  for path in files:
    for i, raw in enumerate(read_rows(path)):
      row = parse_row(raw, path, i)
      by[_key(row)].append(row)
  rng = random.Random(seed)
  return {k: rng.sample(v, min(per_source, len(v))) for k, v in sorted(by.items())}


def reference_response(verifier: str, row: dict) -> str | None:
  """The row's reference as a response in its verifier's format (its domain's `reference`, else
  its answer wrapped; code: a program that looks each test's input up in a table of the
  expected outputs); None where the row has none or its domain has no hooks."""
  h = domains.hooks(verifier)
  if h is None:
    return None
  if h.reference is not None:
    return h.reference(row)
  ref = h.answer_of(row)
  return None if ref is None else h.wrap(ref)


def check_references(rows: list[dict], pool) -> list[str | None]:
  """For parsed rows: None where the row's own reference earns full reward through its
  verifier (or the row has no reference to check), else the reason it is dropped."""
  jobs, where = [], []
  out: list[str | None] = [None] * len(rows)
  for i, row in enumerate(rows):
    verifier = rewards.verifier_name(row["data_source"])
    try:
      response = reference_response(verifier, row)
    except (ValueError, KeyError, TypeError, LookupError) as e:
      out[i] = f"reference unusable ({type(e).__name__})"
      continue
    if response is not None:
      jobs.append((row["data_source"], response, row["reference"], row["extra"]))
      where.append(i)
  for i, s in zip(where, pool.score_many(jobs)):
    if s.failed and "timeout" in s.reason:
      out[i] = "reference times out"
    elif s.failed:
      out[i] = f"reference cannot be scored ({s.reason[:60]})"
    elif s.value < 1.0:
      out[i] = f"reference scores {s.value:.1f}"
  return out


def responses(verifier: str, row: dict, others: list[dict]) -> tuple[str | None, str, dict]:
  """(reference response or None, honest wrong response, {strategy: response}): the domain's own
  (`responses` hook), else the answer strategies."""
  h = domains.hooks(verifier)
  if h.responses is not None:
    return h.responses(row, others)
  ref = h.answer_of(row)
  other_refs = [a for a in (h.answer_of(o) for o in others) if a and a != ref]
  if ref is not None and re.fullmatch(r"[A-Ja-j]", ref.strip()):  # a multiple-choice key
    wrong = next(c for c in "ABCD" if c != ref.strip().upper())
    other_refs = [c for c in "ABCD" if c != ref.strip().upper()]
    every = " ".join("ABCD")
  else:
    # wrong candidates: other rows' answers, the other half of a yes/no or true/false pair,
    # the domain's near misses (a puzzle's roles swapped), and the reference with a digit more
    # (so there is always one)
    pair = {"yes": "No", "no": "Yes", "true": "False", "false": "True"}.get((ref or "").lower())
    near = h.near_misses(row, ref) if h.near_misses is not None else []
    extra = (pair, *near, f"{ref}1")
    other_refs = other_refs + [a for a in extra if a and a not in other_refs]
    wrong = other_refs[0]
    every = ", ".join([ref or ""] + other_refs[:5])
  raw = {
    "empty": "",
    "blank": "  \n ",
    "copy_question": domains.question(row),
    "every_candidate": every,
    "longest": " ".join([ref or ""] + other_refs * 50)[:20000] + " " + "x " * 4000,
    "veto": h.veto,
  }
  nudged = domains.nudge(ref) if ref is not None else None
  if nudged:
    raw["float_for_int"] = nudged
  return (
    None if ref is None else h.wrap(ref),
    h.wrap(wrong),
    {k: h.wrap(v) for k, v in raw.items()},
  )


def honest_formats(verifier: str, row: dict) -> dict[str, str]:
  """{style: an honest correct response} for a row (its domain's `honest`): its reference in
  the formats reasoning models write."""
  return domains.hooks(verifier).honest(row)


def attack_pairs(
  verifier: str,
  *,
  prompt: str,
  extra: dict,
  answer,
  spec,
  wrap,
  wrong: str,
  seed: int,
  right: str | None = None,
):
  """[(class, attack response, bar response)] for one row: the domain's own attacks (its
  `attacks_of`), else the answer attacks (`attacks.answer_classes`), and the thinking attacks;
  `wrap` puts an answer or program in the verifier's format; `wrong` is the row's honest wrong
  response (the bar where a class has no bar of its own); `right` its best known response (the
  reference's, else `wrong`)."""
  own = domains.hooks(verifier).attacks_of
  raw = own(prompt, extra, answer, spec, seed) if own else attacks.answer_classes(prompt, answer)
  out = [
    (cls, wrap(a), wrong if b is None else wrap(b)) for cls, got in raw.items() for a, b in got
  ]
  return out + [(cls, a, wrong) for cls, a in attacks.thinking_attacks(right or wrong, wrong)]


def _attack_pairs(verifier: str, row: dict, wrong: str, seed: int, right=None) -> list[tuple]:
  h = domains.hooks(verifier)
  spec = h.tests(row) if h.tests is not None else None
  answer, prompt = h.answer_of(row), domains.question(row)
  got = attack_pairs(verifier, prompt=prompt, extra=row["extra"], answer=answer, spec=spec,
                     wrap=h.wrap, wrong=wrong, seed=seed, right=right)  # fmt: skip
  return [t for cls, hack, bar in got for t in ((f"attack/{cls}", hack), (f"bar/{cls}", bar))]


def audit(
  directory: str, *, per_source: int = 8, seed: int = 0, pool=None, attack: bool = False
) -> dict:
  """{source: {rows, reference, honest_wrong, honest_formats, strategies: {name: {mean,
  failed}}, best, attacks, problems}} over a sample of each source's rows (`attack`: with the
  red team's classes, `data.attacks`)."""

  rows = sample_rows(data_files(directory), per_source, seed)
  own = pool is None
  pool = pool or VerifierPool(processes=2)
  report = {}
  try:
    for key, sample in rows.items():
      verifier = rewards.verifier_name(sample[0]["data_source"])
      if domains.hooks(verifier) is None:
        report[key] = unaudited(verifier, len(sample))
        continue
      jobs, tags = [], []
      for i, row in enumerate(sample):
        others = sample[i + 1 :] + sample[:i]
        ref, wrong, strat = responses(verifier, row, others)
        meta = dict(row["extra"], prompt_text=domains.question(row))
        formats = [(f"honest/{k}", v) for k, v in honest_formats(verifier, row).items()]
        pairs = [("reference", ref), ("honest_wrong", wrong), *strat.items(), *formats]
        if attack:
          pairs += _attack_pairs(verifier, row, wrong, i, ref)
        for tag, text in pairs:
          if text is not None:
            jobs.append((row["data_source"], text, row["reference"], meta))
            tags.append(tag)
      scores = pool.score_many(jobs)
      by = collections.defaultdict(list)
      for tag, s in zip(tags, scores):
        by[tag].append(s)
      report[key] = _summarise(key, len(sample), by)
  finally:
    if own:
      pool.close()
  return report


def unaudited(verifier: str, n: int) -> dict:
  """The report of a source whose verifier's domain offers no audit hooks: listed, not judged."""
  where = "its row in prorl_jax/rewards/verifiers.py names no domain"
  return {
    "unaudited": f"verifier {verifier!r} has no audit hooks ({where})",
    "attacks": {},
    "rows": n,
    "reference": None,
    "honest_wrong": None,
    "honest_formats": {"responses": 0, "accepted": None},
    "strategies": {},
    "best": {"strategy": None, "mean": None},
    "problems": [],
  }


def _summarise(key: str, n: int, by: dict) -> dict:
  def mean(tag):
    got = by.get(tag)
    return None if not got else sum(s.value for s in got) / len(got)

  honest = mean("honest_wrong") or 0.0
  formats = [(tag, s) for tag, got in by.items() if tag.startswith("honest/") for s in got]
  accepted = sum(s.value == 1.0 for _, s in formats) / len(formats) if formats else None
  strategies = {
    t: {
      "mean": mean(t),
      "failed": sum(s.failed for s in by[t]),
      "example": next((s.reason for s in by[t] if s.value > 0 or s.failed), ""),
    }
    for t in STRATEGIES
    if t in by
  }
  best = max(strategies.items(), key=lambda kv: kv[1]["mean"]) if strategies else (None, None)
  problems = []
  ref = mean("reference")
  if ref is not None and ref < 1.0:
    bad = next(s.reason for s in by["reference"] if s.value < 1.0)
    problems.append(f"the reference earns {ref:.2f} ({bad})")
  if ref is not None and ref <= honest + 1e-9:
    problems.append(f"an honest wrong answer earns {honest:.2f}, as much as the reference")
  if accepted is not None and accepted < 1.0:
    bad = next(f"{tag}: {s.reason}" for tag, s in formats if s.value < 1.0)
    problems.append(f"honest formats earn full credit {accepted:.0%} of the time ({bad})")
  for t in ("empty", "blank"):
    if t in strategies and strategies[t]["mean"] > 0:
      problems.append(f"an {t} answer earns {strategies[t]['mean']:.2f}")
  for t, st in strategies.items():
    if st["mean"] > honest + 1e-9:
      problems.append(f"{t} earns {st['mean']:.2f} > honest wrong {honest:.2f} ({st['example']})")
    if st["failed"]:
      problems.append(f"{t} is marked a verifier failure {st['failed']} times (a veto)")
  hacks, more = attacks.summarise(by, honest)
  return {
    "attacks": hacks,
    "rows": n,
    "reference": ref,
    "honest_wrong": honest,
    "honest_formats": {"responses": len(formats), "accepted": accepted},
    "strategies": strategies,
    "best": {"strategy": best[0], "mean": best[1]["mean"] if best[1] else None},
    "problems": problems + more,
  }


def gameable(report: dict) -> list[str]:
  """The sources of an `audit` report with a problem (the command then exits 1)."""
  return [k for k, r in report.items() if r["problems"]]
