#!/usr/bin/env bash
# Downloads the Python wheels that the GPU machine lacks into bench/wheels/ (ignored by git),
# for bench/run_loss_bench_cuda.sh, which installs them there with
#   python3 -m pip install --no-index --no-deps --target DIR bench/wheels/*.whl
# (that machine reaches no package index). Today that is Liger-Kernel alone: a pure-Python
# wheel (Triton kernels, ~0.9 MB) whose requirements, torch and triton, the GPU image has.
# scripts/bundle.sh copies bench/wheels/ into its bundle, so one carried folder holds all.
#   bench/fetch_wheels.sh            (needs pip and network access; PIP=... picks the pip)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/bench/wheels"
read -ra pip <<<"${PIP:-python3 -m pip}"
liger="${LIGER_VERSION:-0.8.5}"
mkdir -p "$dest"
# The GPU machine runs CPython 3.12 on x86-64 Linux; a py3-none-any wheel fits any of them.
"${pip[@]}" download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$dest" "liger-kernel==$liger"
for w in "$dest"/*.whl; do
  echo "$(du -h "$w" | cut -f1)  $(basename "$w")"
  # What it needs (the GPU image must have these: torch and triton for Liger).
  unzip -p "$w" '*.dist-info/METADATA' | grep '^Requires-Dist' | grep -v 'extra ==' | sed 's/^/    /' || true
done
