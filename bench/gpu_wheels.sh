#!/usr/bin/env bash
# The packages `bench/gpu.py --stages=e2e` needs that a bare CUDA JAX image lacks (its own image
# holds jax, flax, optax, orbax, tensorstore, transformers, torch), as Python 3.12 wheels in
# .whl/, to carry to a machine without internet:
#   bash bench/gpu_wheels.sh            # here, where pip reaches a registry
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site python bench/gpu.py --stages=e2e --out DIR   # there
# Versions are requirements.txt's.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
pin() { grep -i "^$1==" requirements.txt; }
pkgs=(ml-collections pyicu-wheels snowballstemmer stop-words)
for p in "${pkgs[@]}"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "$(pin "$p")"
done
ls -la .whl
