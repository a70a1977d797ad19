"""`python -m prorl_jax.cli.audit --data=DIR`: the verifier audit (`data.audit`) of a prepared
data directory as a table; exits 1 when a degenerate or hedging strategy earns more than an honest
wrong answer on some source."""

from __future__ import annotations

import argparse
import json
import sys

from prorl_jax.cli import errors
from prorl_jax.data.audit import audit, gameable
from prorl_jax.data.prompts import DataError


def _fmt(v) -> str:
  return "  -  " if v is None else f"{v:5.2f}"


def main(argv=None) -> int:
  """The command line of the verifier audit; returns 1 when a degenerate or hedging strategy
  earns more than an honest wrong answer on some source, else 0."""
  ap = argparse.ArgumentParser(
    prog="python -m prorl_jax.cli.audit",
    description="Scores degenerate and hedging strategies on real rows of a prepared data "
    "directory beside the reference answers; exits 1 when one earns more than an honest wrong "
    "answer.",
  )
  ap.add_argument("--data", required=True, help="a `prepare --mix` or `prepare --suite` output")
  ap.add_argument("--per_source", type=int, default=8, help="rows sampled per source (or task)")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--json", default="", help="also write the table here")
  args = ap.parse_args(argv)
  return errors.exit_status(lambda: _report(args), DataError, OSError, ValueError, KeyError)


def _report(args) -> int:
  report = audit(args.data, per_source=args.per_source, seed=args.seed)
  width = max([len(k) for k in report] + [6])
  print(f"{'source':<{width}}  rows  reference  honest-wrong  best strategy")
  for key, r in report.items():
    best = r["best"]
    print(
      f"{key:<{width}}  {r['rows']:>4}  {_fmt(r['reference']):>9}  {_fmt(r['honest_wrong']):>12}"
      f"  {_fmt(best['mean'])} ({best['strategy']})"
    )
    for p in r["problems"]:
      print(f"  !! {key}: {p}")
  if args.json:
    with open(args.json, "w") as f:
      json.dump(report, f, indent=1)
  bad = gameable(report)
  if bad:
    print(f"{len(bad)} of {len(report)} sources have a reward a policy can game: {', '.join(bad)}")
    return 1
  print(f"no strategy earns more than an honest wrong answer in {len(report)} sources")
  return 0


if __name__ == "__main__":
  sys.exit(main())
