#!/usr/bin/env bash
# The ablation grid: one run per ProRL component switched off, then a table of final held-out
# pass@1 and entropy and one dashboard of all runs overlaid (RUN_ROOT/compare.png).
# Usage: [CONFIG=configs/qwen15b.py] launch/ablations.sh [RUN_ROOT] [extra --config flags]
# CONFIG defaults to configs/tiny.py (the CPU demo: ~8-10 min a run on 2 cores, the grid's 9
# runs one after another); RUN_ROOT to runs/ablations; DRY_RUN=1 prints the commands only.
# It prints an estimate of the grid's time first and refines it after every run.
set -euo pipefail
cd "$(dirname "$0")/.."
source launch/common.sh
root=runs/ablations
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then root=$1; shift; fi
PY=${PY:-.venv/bin/python}
CONFIG=${CONFIG:-configs/tiny.py}
declare -A grid=(
  [full]=""
  [no_clip_higher]="--config.algo.clip_high=0.2"
  [no_kl]="--config.algo.kl_coef=0"
  [no_dynamic_sampling]="--config.algo.dynamic_sampling=False"
  [no_length_penalty]="--config.algo.length_penalty=off"
  [no_truncation_penalty]="--config.algo.truncation_penalty=1.0"
  [no_ref_reset]="--config.algo.ref_reset_every=0"
  [grpo]="--config.algo.estimator=grpo"
  [no_is_correction]="--config.algo.is_correction=none"
)
base=()
if [ "$CONFIG" = configs/tiny.py ]; then  # one shared warm-started base model for the demo
  if [ ! -f "$root/base/config.json" ]; then
    run mkdir -p "$root"
    run "$PY" -c "from prorl_jax.demo import warm_start; warm_start.build('$root/base')"
  fi
  base=("--config.model.path=$root/base")
fi
# How long the grid takes: the median wall time of the runs already finished under RUN_ROOT,
# else the demo's measured one for the tiny config; refined after every run.
estimate() {  # estimate [DONE_NAME DONE_SECONDS]
  python3 - "$root" "$CONFIG" "${#grid[@]}" "$@" <<'PYEOF'
import json, os, statistics, sys, time
root, config, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
walls, left = [], total
for name in (os.listdir(root) if os.path.isdir(root) else []):
  s = os.path.join(root, name, "summary.json")
  if name != "base" and os.path.isfile(s):
    summ = json.load(open(s))
    walls.append(summ.get("wall_seconds_total") or summ.get("wall_seconds") or 0)
    left -= 1
if len(sys.argv) > 4:
  print(f"ablation {sys.argv[4]} done in {float(sys.argv[5]) / 60:.1f} min")
if walls:
  per, basis = statistics.median(walls), f"the median of the {len(walls)} finished run(s) here"
elif config == "configs/tiny.py":
  per, basis = 600.0, "make demo's measured ~10 min on 2 cores, docs/demo.md"
else:
  print(f"estimate: {left} run(s) one after another, each one full run of {config} "
        "(the README's hardware table: days per run on one 8-GPU node); refined after the first")
  sys.exit(0)
end = time.strftime("%a %H:%M", time.localtime(time.time() + left * per))
print(f"estimate: {left} run(s) left x {per / 60:.1f} min ({basis}) = "
      f"{left * per / 3600:.1f} h, done ~{end}")
PYEOF
}
estimate
for name in $(printf '%s\n' "${!grid[@]}" | sort); do
  # shellcheck disable=SC2206  # a grid entry is zero or one flag
  cmd=("$PY" -m prorl_jax.main "--config=$CONFIG" "--config.run_dir=$root/$name"
       "${base[@]}" ${grid[$name]} "$@")
  show "${cmd[@]}"
  if [ "${DRY_RUN:-0}" != 1 ]; then
    t0=$(date +%s)
    "${cmd[@]}" > "$root/$name.log" 2>&1 || echo "  $name failed: see $root/$name.log"
    estimate "$name" $(($(date +%s) - t0))
  fi
done
if [ "${DRY_RUN:-0}" = 1 ]; then exit 0; fi
$PY - "$root" <<'PYEOF'
import json, os, sys
root = sys.argv[1]
print(f"{'ablation':24s} {'pass@1 start':>12s} {'pass@1 end':>10s} {'entropy':>8s}")
for name in sorted(os.listdir(root)):
  s = os.path.join(root, name, "summary.json")
  if not os.path.isfile(s):
    continue
  summ = json.load(open(s))
  rows = [json.loads(l) for l in open(os.path.join(root, name, "metrics.jsonl"))]
  ent = [r["actor/entropy_old"] for r in rows if "actor/entropy_old" in r]
  print(f"{name:24s} {summ.get('pass@1_start') or 0:12.3f} {summ.get('pass@1_end') or 0:10.3f} "
        f"{(ent[-1] if ent else float('nan')):8.3f}")
PYEOF
runs=()
for name in $(printf '%s\n' "${!grid[@]}" | sort); do
  if [ -f "$root/$name/metrics.jsonl" ]; then runs+=("$root/$name"); fi
done
if [ ${#runs[@]} -gt 0 ]; then "$PY" -m prorl_jax.cli.plot "${runs[@]}" --out="$root/compare.png"; fi
