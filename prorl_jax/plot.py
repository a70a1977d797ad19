"""`python -m prorl_jax.plot RUN_DIR`: a PNG dashboard of a run's metrics.jsonl.

Panels: reward (raw, shaped), held-out pass@1, response length and truncation, entropy, KL to the
reference, clip fractions, dynamic-sampling keep rate, throughput and time per phase (rollout,
update, publish); reference resets (red) and length-penalty phase switches (green) are
marked on every panel.
"""

from __future__ import annotations

import os
import sys

from prorl_jax.metrics import read_jsonl

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
)


class PlotError(ValueError):
  """A run directory without metrics, a metrics file that is not JSON lines; one line."""


def dashboard(run_dir: str, out: str | None = None) -> str:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

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
  resets = [r["step"] for r in rows if str(r.get("event", "")).startswith("reference_reset")]
  phases = [r["step"] for r in rows if str(r.get("event", "")).startswith("length_penalty")]
  fig, axes = plt.subplots(2, 5, figsize=(22, 7.5))
  for ax, (title, keys) in zip(axes.flat, PANELS):
    for key in keys:
      pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
      if pts:
        xs, ys = zip(*pts)
        ax.plot(xs, ys, marker="o" if len(pts) < 30 else None, ms=3, label=key.split("/")[-1])
    for s in resets:
      ax.axvline(s, color="red", alpha=0.4, lw=1)
    for s in phases:
      ax.axvline(s, color="green", alpha=0.3, lw=1, ls="--")
    ax.set_title(title)
    ax.set_xlabel("RL step")
    if len(keys) > 1:
      ax.legend(fontsize=7)
  fig.suptitle(f"{run_dir}  (red: reference reset, green dashed: length-penalty phase switch)")
  fig.tight_layout()
  out = out or os.path.join(run_dir, "dashboard.png")
  fig.savefig(out, dpi=80)
  plt.close(fig)
  return out


def main(argv=None) -> int:
  from prorl_jax import cli

  argv = sys.argv[1:] if argv is None else argv
  argv = [a for a in argv if a != "--debug"]
  if len(argv) != 1:
    cli.fail("usage: python -m prorl_jax.plot RUN_DIR (writes RUN_DIR/dashboard.png)")
  with cli.user_errors(PlotError):
    print(dashboard(argv[0]))
  return 0


if __name__ == "__main__":
  sys.exit(main())
