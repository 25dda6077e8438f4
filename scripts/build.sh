#!/usr/bin/env bash
# Configures and builds codistill into build/ (Release). Extra arguments go to cmake,
# e.g. scripts/build.sh -DCODISTILL_CUDA=OFF. Jobs: $JOBS or the number of cores.
#   BUILD_TARGETS="codistill-train codistill-inspect"  builds only these targets (the demo)
#   BUILD_DIR                                           the build folder (default build/)
# Ninja where it is installed (scripts/setup.sh installs it), Make otherwise; a build folder
# keeps the generator it was made with. CUDA architectures, unless given
# (-DCMAKE_CUDA_ARCHITECTURES=...): this machine's GPUs ("native") where nvidia-smi sees one,
# else one architecture (90), which checks that every kernel compiles; a build for other
# GPUs names them explicitly (CMake's default for a bare `cmake` stays "80;90").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
jobs="${JOBS:-$(nproc)}"
mkdir -p "$build"
args=(-DCMAKE_BUILD_TYPE=Release)
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null; then
  args+=(-G Ninja)
fi
if ! grep -q "^CMAKE_CUDA_ARCHITECTURES:" "$build/CMakeCache.txt" 2>/dev/null &&
   [[ " $* " != *" -DCMAKE_CUDA_ARCHITECTURES="* ]]; then
  if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    args+=(-DCMAKE_CUDA_ARCHITECTURES=native)
  else
    args+=(-DCMAKE_CUDA_ARCHITECTURES=90)
  fi
fi
cmake -S "$root" -B "$build" "${args[@]}" "$@" >"$build/configure.log" 2>&1 || {
  cat "$build/configure.log" >&2; echo "build.sh: cmake configuration failed" >&2; exit 1; }
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "$jobs" "${targets[@]}"
