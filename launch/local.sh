#!/usr/bin/env bash
# One machine: the trainer plus rollout worker processes, all reading one exchange directory.
#
#   CONFIG=configs/tiny.py WORKERS=2 launch/local.sh [--config.x=... more trainer flags]
#   CONFIG=configs/qwen15b.py ENGINE=vllm launch/local.sh --config.model.path=/models/r1-1.5b
#
# CONFIG   the trainer config file (required)
# ENGINE   jax|vllm (default jax)
# WORKERS  rollout worker processes: a number, or auto (the default): one JAX worker, or with
#          ENGINE=vllm one vLLM worker per TP GPUs so that every GPU both trains and generates,
#          placed by the same planner as the trainer's own local workers (prorl_jax/rollout/layout.py;
#          the layout and any idle GPU are printed first)
# TP       GPUs per vLLM engine (default 1); VLLM_MEMORY each engine's gpu_memory_utilization
#          (default 0.5; the trainer takes what is left, less 5 %); GPUS the GPU count (default:
#          the visible ones)
# RUN_DIR  run directory (default runs/local); the exchange is $RUN_DIR/exchange
# PY       trainer python (default .venv/bin/python); WORKER_PY the workers' (default: $PY, or
#          .venv-vllm/bin/python for ENGINE=vllm, built by `make venv-vllm`)
# DRY_RUN=1 prints the commands only.
set -euo pipefail
cd "$(dirname "$0")/.."
source launch/common.sh
need CONFIG "the trainer config, e.g. CONFIG=configs/tiny.py"
WORKERS=${WORKERS:-auto}
ENGINE=${ENGINE:-jax}
TP=${TP:-1}
VLLM_MEMORY=${VLLM_MEMORY:-0.5}
RUN_DIR=${RUN_DIR:-runs/local}
PY=${PY:-.venv/bin/python}
if [ "$ENGINE" = vllm ]; then WORKER_PY=${WORKER_PY:-.venv-vllm/bin/python}; fi
WORKER_PY=${WORKER_PY:-$PY}
case "$WORKERS" in auto) ;; ''|*[!0-9]*) echo "error: WORKERS must be a number or auto, got '$WORKERS'" >&2; exit 2;; esac
case "$ENGINE" in jax|vllm) ;; *) echo "error: ENGINE must be jax or vllm, got '$ENGINE'" >&2; exit 2;; esac
for p in "$PY" "$WORKER_PY"; do
  if [ "${DRY_RUN:-0}" != 1 ] && ! command -v "$p" >/dev/null; then
    if [ "$p" = "$PY" ]; then fix="run 'make venv', or set PY"; else fix="run 'make venv-vllm' (builds .venv-vllm), or set WORKER_PY"; fi
    echo "error: $p not found: $fix" >&2
    exit 2
  fi
done
# The planner needs only the standard library: any python3 runs it (DRY_RUN without a venv too).
plan_py=$PY; command -v "$plan_py" >/dev/null || plan_py=python3
layout=$(PYTHONPATH=. "$plan_py" -m prorl_jax.cli.layout --shell --engine="$ENGINE" \
  --workers="$WORKERS" --tensor_parallel="$TP" --vllm_memory="$VLLM_MEMORY" ${GPUS:+--gpus="$GPUS"}) || exit 2
eval "$layout"  # WORKERS, WORKER_GPUS, VLLM_MEMORY, TRAINER_MEMORY
EXCHANGE="$(realpath -m "$RUN_DIR")/exchange"
BG_PIDS=()
trap 'if [ ${#BG_PIDS[@]} -gt 0 ]; then kill "${BG_PIDS[@]}" 2>/dev/null || true; wait || true; fi' EXIT
trainer=()
for i in $(seq 0 $((WORKERS - 1))); do
  worker=("$WORKER_PY" -m prorl_jax.cli.worker --exchange="$EXCHANGE" --engine="$ENGINE" --worker_id="local$i")
  if [ "${WORKER_GPUS[$i]}" != - ]; then  # a vLLM engine pinned to its GPUs
    worker=(env CUDA_VISIBLE_DEVICES="${WORKER_GPUS[$i]}" "${worker[@]}"
            --engine_options="{\"tensor_parallel_size\": $TP, \"gpu_memory_utilization\": $VLLM_MEMORY}")
  fi
  run_bg "${worker[@]}"
done
if [ -n "$TRAINER_MEMORY" ]; then trainer+=(--config.model.memory_fraction="$TRAINER_MEMORY"); fi
run "$PY" -m prorl_jax.main --config="$CONFIG" --config.run_dir="$RUN_DIR" \
  --config.rollout.exchange="$EXCHANGE" --config.rollout.local_workers=0 --config.rollout.external_workers="$WORKERS" \
  --config.rollout.engine="$ENGINE" --config.vllm.tensor_parallel="$TP" "${trainer[@]}" "$@"
