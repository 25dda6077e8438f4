#!/usr/bin/env bash
# Checkpoint bandwidth beside dd, side by side in one run (DESIGN.md section 10): writes
# and reads a 100M-parameter (400 MiB) checkpoint and dd's 400 MiB, into the same folder.
# Prints a table with the ratios and writes bench/results/checkpoint_cpu.json and .txt.
#   bench/run_checkpoint_bench.sh [DIR]      (default: a fresh folder under bench/out/;
#                                             give the run directory's file system, e.g. NFS)
# Environment: REPEATS (default 7), PARAMS (default 104857600).
# Reads are measured right after the writes (warm page cache, as for dd) and, where this
# process may drop the page cache (root), cold as well. See bench/checkpoint/bench_checkpoint.cpp.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCODISTILL_BENCH=ON >"$root/bench/.configure.log" 2>&1 || {
  cat "$root/bench/.configure.log" >&2; exit 1; }
rm -f "$root/bench/.configure.log"
cmake --build "$build" --target bench_checkpoint -j "${JOBS:-$(nproc)}"
dir="${1:-$root/bench/out/checkpoint}"
mkdir -p "$dir" "$root/bench/results"
"$build/bench/bench_checkpoint" --dir "$dir" --repeats "${REPEATS:-7}" --params "${PARAMS:-104857600}" \
  --out "$root/bench/results/checkpoint_cpu"
rmdir "$dir" 2>/dev/null || true
