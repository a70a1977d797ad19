#!/usr/bin/env bash
# A TPU VM slice trains (one JAX process per TPU host). Without WORKER_VMS the slice also
# generates: rollout.engine=inline, every host sampling with its replica of the policy between
# updates (the JAX engine's continuous batching), no GPU VM, one command:
#
#   TPU_NAME=prorl-v5p ZONE=us-east5-a EXCHANGE=gs://bucket/runs/x/exchange \
#   CONFIG=configs/qwen15b.py launch/tpu/train.sh [--config.x=...]
#
# With WORKER_VMS, GPU VMs run vLLM rollout workers instead, on the same gs:// exchange:
#
#   ... WORKER_VMS="gpu-vm-1 gpu-vm-2" WORKER_ZONE=us-east5-b launch/tpu/train.sh
#
# TPU_NAME, ZONE    the TPU VM slice (required); REPO_DIR the checkout on every VM (default
#                   ~/prorl_jax, same path everywhere, with `make venv-tpu` run on the TPU hosts and
#                   `launch/vllm_env.sh gpu` on the GPU VMs)
# EXCHANGE          gs:// URL (required): requests and results (and, with GPU VMs, the weights);
#                   CKPT_DIR where Orbax writes checkpoints from every host (default:
#                   gs://.../checkpoints beside the exchange); RUN_DIR the local run dir on each
#                   host (metrics and summary on host 0; default runs/$TPU_NAME)
# WORKER_VMS        space-separated GPU VM names (optional); WORKER_ZONE (default: $ZONE)
# CONFIG            trainer config (required)
# DRY_RUN=1 prints the commands only.
set -euo pipefail
cd "$(dirname "$0")/../.."
source launch/common.sh
need CONFIG "the trainer config, e.g. CONFIG=configs/qwen15b.py"
need TPU_NAME "the TPU VM (pod slice) name, e.g. TPU_NAME=prorl-v5p-64"
need ZONE "the TPU's zone, e.g. ZONE=us-east5-a"
need EXCHANGE "a gs:// URL every TPU host (and GPU VM) reaches, e.g. gs://bucket/prorl/exchange"
case "$EXCHANGE" in gs://*) ;; *)
  echo "error: EXCHANGE must be a gs:// URL (the TPU hosts and GPU VMs share no filesystem), got '$EXCHANGE'" >&2
  exit 2;;
esac
REPO_DIR=${REPO_DIR:-'~/prorl_jax'}
WORKER_VMS=${WORKER_VMS:-}
WORKER_ZONE=${WORKER_ZONE:-$ZONE}
RUN_DIR=${RUN_DIR:-runs/$TPU_NAME}
CKPT_DIR=${CKPT_DIR:-${EXCHANGE%/*}/checkpoints}
if [ "${DRY_RUN:-0}" != 1 ] && ! command -v gcloud >/dev/null; then
  echo "error: gcloud not found: install the Google Cloud CLI and authenticate" >&2
  exit 2
fi
extra=$(printf ' %q' "$@")
if [ -n "$WORKER_VMS" ]; then
  for vm in $WORKER_VMS; do
    run gcloud compute ssh "$vm" --zone="$WORKER_ZONE" --command="cd $REPO_DIR && nohup launch/vllm_env.sh gpu -- python -m prorl_jax.cli.worker --exchange=$EXCHANGE --engine=vllm > worker.log 2>&1 &"
  done
  rollouts="--config.rollout.engine=vllm --config.rollout.local_workers=0 --config.rollout.external_workers=$(echo $WORKER_VMS | wc -w)"
else
  rollouts="--config.rollout.engine=inline --config.jax_engine.batching=continuous --config.jax_engine.dtype=bfloat16 --config.rollout.pipeline=False --config.rollout.inflight_updates=False"
fi
# Every TPU host runs the same command; jax.distributed reads the slice from the TPU metadata.
run gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" --worker=all --command="cd $REPO_DIR && .venv/bin/python -m prorl_jax.main --config=$CONFIG --config.run_dir=$RUN_DIR --config.checkpoint.dir=$CKPT_DIR --config.rollout.exchange=$EXCHANGE $rollouts --config.dist.auto=True$extra"
