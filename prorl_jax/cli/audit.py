"""`python -m prorl_jax.cli.audit --data=DIR [--attack]`: the verifier audit (`data.audit`) of a
prepared data directory as a table; exits 1 when a degenerate or hedging strategy (with
`--attack`, a red-team class: `data.attacks`) earns more than its bar on some source, or an honest
correct answer in a format reasoning models write earns less than full credit."""

from __future__ import annotations

import json
import sys

from absl import flags

from prorl_jax.cli import errors
from prorl_jax.cli.flags import USAGE_EXIT, parse
from prorl_jax.data.audit import audit, gameable
from prorl_jax.data.prompts import DataError


def _fmt(v) -> str:
  return "  -  " if v is None else f"{v:5.2f}"


FLAGS = flags.FlagValues()
_F = dict(flag_values=FLAGS)
flags.DEFINE_string("data", None, "a `prepare --mix` or `prepare --suite` output", **_F)
flags.mark_flag_as_required("data", flag_values=FLAGS)
flags.DEFINE_integer("per_source", 8, "rows sampled per source (or task)", **_F)
flags.DEFINE_integer("seed", 0, "the sampling seed", **_F)
flags.DEFINE_string("json", "", "also write the table here", **_F)
flags.DEFINE_bool("attack", False, "also run the red team's classes (data.attacks)", **_F)


def main(argv=None) -> int:
  """The command line of the verifier audit; returns 1 when a degenerate or hedging strategy
  earns more than an honest wrong answer on some source, else 0 (2 for a user error)."""
  about = __doc__.split("\n\n")[0]
  if parse(FLAGS, argv, prog="python -m prorl_jax.cli.audit", about=about) is None:
    return USAGE_EXIT
  return errors.exit_status(lambda: _report(FLAGS), DataError, OSError, ValueError, KeyError)


def _report(args) -> int:
  report = audit(args.data, per_source=args.per_source, seed=args.seed, attack=args.attack)
  width = max([len(k) for k in report] + [6])
  print(f"{'source':<{width}}  rows  reference  honest-wrong  honest-formats  best strategy")
  for key, r in report.items():
    if r.get("unaudited"):
      print(f"{key:<{width}}  {r['rows']:>4}  unaudited: {r['unaudited']}")
      continue
    best, formats = r["best"], r["honest_formats"]
    accepted = formats["accepted"]
    shown = "  -  " if accepted is None else f"{accepted:5.0%} of {formats['responses']:>3}"
    print(
      f"{key:<{width}}  {r['rows']:>4}  {_fmt(r['reference']):>9}  {_fmt(r['honest_wrong']):>12}"
      f"  {shown:>14}  {_fmt(best['mean'])} ({best['strategy']})"
    )
    for cls, a in r["attacks"].items():
      print(f"  attack {cls:<18} {_fmt(a['attack'])} (bar {_fmt(a['bar'])})")
    for p in r["problems"]:
      print(f"  !! {key}: {p}")
  if args.json:
    with open(args.json, "w") as f:
      json.dump(report, f, indent=1)
  bad = gameable(report)
  if bad:
    print(f"{len(bad)} of {len(report)} sources have a reward a policy can game: {', '.join(bad)}")
    return 1
  what = "strategy or attack" if args.attack else "strategy"
  skipped = sum(bool(r.get("unaudited")) for r in report.values())
  audited = f"{len(report) - skipped} sources" + (f" ({skipped} unaudited)" if skipped else "")
  print(f"no {what} earns more than its bar in {audited}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
