#!/usr/bin/env bash
# Configures and builds codistill into build/ (Release). Extra arguments go to cmake,
# e.g. scripts/build.sh -DCODISTILL_CUDA=OFF. Jobs: $JOBS or the number of cores.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
jobs="${JOBS:-$(nproc)}"
mkdir -p "$build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >"$build/configure.log" 2>&1 || {
  cat "$build/configure.log" >&2; echo "build.sh: cmake configuration failed" >&2; exit 1; }
cmake --build "$build" -j "$jobs"
