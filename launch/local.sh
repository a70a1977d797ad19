#!/usr/bin/env bash
# One machine: the trainer plus N rollout worker processes, all reading one exchange directory.
#
#   CONFIG=configs/tiny.py WORKERS=2 launch/local.sh [--config.x=... more trainer flags]
#
# CONFIG   the trainer config file (required)
# WORKERS  rollout worker processes (default 1); ENGINE jax|vllm (default jax)
# RUN_DIR  run directory (default runs/local); the exchange is $RUN_DIR/exchange
# PY       trainer python (default .venv/bin/python); WORKER_PY the workers' (default: $PY, or
#          .venv-vllm/bin/python for ENGINE=vllm, built by `make venv-vllm`)
# DRY_RUN=1 prints the commands only.
set -euo pipefail
cd "$(dirname "$0")/.."
source launch/common.sh
need CONFIG "the trainer config, e.g. CONFIG=configs/tiny.py"
WORKERS=${WORKERS:-1}
ENGINE=${ENGINE:-jax}
RUN_DIR=${RUN_DIR:-runs/local}
PY=${PY:-.venv/bin/python}
if [ "$ENGINE" = vllm ]; then WORKER_PY=${WORKER_PY:-.venv-vllm/bin/python}; fi
WORKER_PY=${WORKER_PY:-$PY}
case "$WORKERS" in ''|*[!0-9]*) echo "error: WORKERS must be a number, got '$WORKERS'" >&2; exit 2;; esac
for p in "$PY" "$WORKER_PY"; do
  if [ "${DRY_RUN:-0}" != 1 ] && ! command -v "$p" >/dev/null; then
    if [ "$p" = "$PY" ]; then fix="run 'make venv', or set PY"; else fix="run 'make venv-vllm' (builds .venv-vllm), or set WORKER_PY"; fi
    echo "error: $p not found: $fix" >&2
    exit 2
  fi
done
EXCHANGE="$(realpath -m "$RUN_DIR")/exchange"
BG_PIDS=()
trap 'if [ ${#BG_PIDS[@]} -gt 0 ]; then kill "${BG_PIDS[@]}" 2>/dev/null || true; wait || true; fi' EXIT
for i in $(seq 0 $((WORKERS - 1))); do
  run_bg "$WORKER_PY" -m prorl_jax.rollout.worker --exchange="$EXCHANGE" --engine="$ENGINE" \
    --worker_id="local$i"
done
run "$PY" -m prorl_jax.main --config="$CONFIG" --config.run_dir="$RUN_DIR" \
  --config.rollout.exchange="$EXCHANGE" --config.rollout.local_workers=0 --config.rollout.external_workers="$WORKERS" \
  --config.rollout.engine="$ENGINE" "$@"
