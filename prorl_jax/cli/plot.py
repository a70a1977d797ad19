"""`prorl-plot RUN_DIR [RUN_DIR ...] [--out=PNG]` (= python -m prorl_jax.cli.plot): a PNG dashboard
of a run's metrics.jsonl, or of several runs overlaid with a legend.

Panels: reward (raw, shaped), held-out pass@1, response length and truncation, entropy, KL to the
reference, clip fractions, dynamic-sampling keep rate, throughput and time per phase (rollout,
update, publish), and the hack monitor's flags (`hacks/{source}/{flag}`: the share of responses
the red team's detectors flag); reference resets (red), length-penalty phase switches (green)
and resumes (grey) are marked on every panel.
"""

from __future__ import annotations

import math
import os
import sys

from absl import flags

from prorl_jax.cli import errors
from prorl_jax.cli.flags import USAGE_EXIT, parse
from prorl_jax.trainer.metrics import SESSIONS, read_jsonl

PANELS = (
  ("reward", ("reward/raw_mean", "reward/shaped_mean")),
  ("held-out pass@1", ("val/pass@1",)),
  ("response length", ("response/length_mean",)),
  ("truncation rate", ("response/truncation_rate",)),
  ("entropy", ("actor/entropy_old",)),
  ("KL to reference", ("actor/kl_ref_old",)),
  ("clip fraction", ("actor/clipfrac_upper", "actor/clipfrac_lower")),
  ("dynamic sampling keep rate", ("sampling/keep_rate",)),
  ("throughput (response tokens/s)", ("perf/tokens_per_s",)),
  ("step time (s)", ("time/rollout_s", "time/update_s", "time/publish_s", "time/step_s")),
  ("reward-hack flags (share of responses)", "hacks/"),  # every metric under the prefix
)


class PlotError(ValueError):
  """A run directory without metrics, a metrics file that is not JSON lines; one line."""


def _rows(run_dir: str) -> list[dict]:
  path = os.path.join(run_dir, "metrics.jsonl")
  try:
    rows = read_jsonl(path)
  except OSError:
    raise PlotError(
      f"{run_dir} has no metrics.jsonl: give the run directory of a run that "
      "has trained at least one step"
    ) from None
  except ValueError as e:
    raise PlotError(f"{path} is not JSON lines ({e})") from None
  if not any("step" in r for r in rows):
    raise PlotError(f"{path} holds no steps yet")
  return rows


def _events(rows: list[dict], prefix: str) -> list[int]:
  return [r["step"] for r in rows if str(r.get("event", "")).startswith(prefix)]


def dashboard(runs: str | list[str], out: str | None = None) -> str:
  """Writes the dashboard of one run directory, or of several overlaid (a color per run, named
  in every panel's legend); returns the PNG's path. Reference resets are red lines (dotted in
  the run's color when overlaid), length-penalty phase switches green dashed, resumes grey."""
  import matplotlib  # lazy: only drawing needs it (a second or two to import)

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # after the backend is chosen

  runs = [runs] if isinstance(runs, str) else list(runs)
  data = {run: _rows(run) for run in runs}
  names = _names(runs)
  one = len(runs) == 1
  from matplotlib.ticker import MaxNLocator  # after the backend, as pyplot

  panels = shown_panels(data)
  fig, axes = plt.subplots(3, 4, figsize=(22, 11))
  for ax in axes.flat[len(panels) :]:
    ax.set_visible(False)
  for ax, (title, keys) in zip(axes.flat, panels):
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    for i, (run, rows) in enumerate(data.items()):
      color = None if one else f"C{i}"
      for j, key in enumerate(_keys(keys, rows)):
        pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
        if not pts:
          continue
        xs, ys = zip(*pts)
        short = key[len(keys) :] if isinstance(keys, str) else key.split("/")[-1]
        label = short if one else f"{names[run]}: {short}"
        style = "-" if one else ("-", "--", ":", "-.")[j % 4]
        ax.plot(
          xs, ys, style, color=color, marker="o" if len(pts) < 30 else None, ms=3, label=label
        )
      for s in _events(rows, "reference_reset"):
        ax.axvline(s, color="red" if one else color, alpha=0.4, lw=1, ls="-" if one else ":")
      if one:
        for s in _events(rows, "length_penalty"):
          ax.axvline(s, color="green", alpha=0.3, lw=1, ls="--")
      for s in _resumes(run):
        ax.axvline(s, color="grey", alpha=0.5, lw=1, ls="-.")
    x0, x1 = ax.dataLim.intervalx
    if x1 - x0 < 2:  # a run of one or two steps: room for whole-step ticks around them
      ax.set_xlim(math.floor(x0) - 1, math.ceil(x1) + 1)
    ax.set_title(title)
    ax.set_xlabel("RL step")
    if ax.get_legend_handles_labels()[0] and (len(_keys(keys, rows)) > 1 or not one):
      ax.legend(fontsize=7)
  what = "red: reference reset, green dashed: length-penalty phase switch"
  if not one:
    what = "dotted: reference resets in the run's color"
  head = runs[0] if one else " vs ".join(names[r] for r in runs)
  fig.suptitle(f"{head}  ({what}; grey: resumed)")
  fig.tight_layout()
  if out is None:
    first = runs[0]
    out = os.path.join(first, "dashboard.png") if one else os.path.join(first, "compare.png")
  fig.savefig(out, dpi=80)
  plt.close(fig)
  return out


def shown_panels(data: dict[str, list[dict]]) -> list[tuple]:
  """The panels with a point to draw in any run (a run without code or IFEval items logs no
  hack flags: that panel is left out, not drawn empty)."""
  return [
    (title, keys)
    for title, keys in PANELS
    if any(
      isinstance(r.get(key), (int, float))
      for rows in data.values()
      for key in _keys(keys, rows)
      for r in rows
    )
  ]


def _keys(keys: tuple | str, rows: list[dict]) -> list[str]:
  """A panel's metrics: its names, or every metric of the runs under its prefix."""
  if isinstance(keys, tuple):
    return list(keys)
  return sorted({k for r in rows for k in r if k.startswith(keys)})


def _names(runs: list[str]) -> dict[str, str]:
  """Short legend names: each run directory's last component, made unique with its parent."""
  base = {r: os.path.basename(os.path.normpath(r)) for r in runs}
  if len(set(base.values())) == len(runs):
    return base
  return {r: os.path.join(*os.path.normpath(r).split(os.sep)[-2:]) for r in runs}


def _resumes(run_dir: str) -> list[int]:
  """The steps a run resumed from (RUN_DIR/sessions.jsonl, one line per start)."""
  try:
    rows = read_jsonl(os.path.join(run_dir, SESSIONS))
  except (OSError, ValueError):
    return []
  return [r["step"] for r in rows if r.get("resumed")]


FLAGS = flags.FlagValues()
flags.DEFINE_string(
  "out",
  None,
  "the PNG (default: the first RUN_DIR's dashboard.png, or compare.png beside it for several runs)",
  flag_values=FLAGS,
)
flags.DEFINE_bool("debug", False, "show tracebacks", flag_values=FLAGS)


def main(argv=None) -> int:
  """The command line of `prorl-plot`; returns the exit status (2 with one line for a user
  error)."""
  runs = parse(
    FLAGS,
    argv,
    prog="prorl-plot",
    about="A PNG dashboard of one run's metrics (RUN_DIR/dashboard.png), or of several runs "
    "overlaid with a legend (e.g. an ablation beside its baseline).",
    args="RUN_DIR [RUN_DIR ...]",
  )
  if runs is None:
    return USAGE_EXIT
  if not runs:
    return errors.exit_status(lambda: _no_runs(), PlotError)
  return errors.exit_status(lambda: print(dashboard(runs, FLAGS.out)) or 0, PlotError)


def _no_runs() -> int:
  raise PlotError("give at least one RUN_DIR (a run directory with metrics.jsonl)")


if __name__ == "__main__":
  sys.exit(main())
