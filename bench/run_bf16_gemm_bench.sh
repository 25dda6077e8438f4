#!/usr/bin/env bash
# Which bf16 GEMM kernel this CPU should run (kernels/cpu/bf16.hpp, Bf16Kernel): the
# instruction peaks of float32 FMA and AVX512-BF16's dot product, then GPT-2 124M's GEMMs by
# the onednn kernel, the widened kernel and the float32 gemm, alternating
# (bench/kernels/bench_bf16_gemm.cpp). Raw output, with the CPU model, load and commit, to
# RESULTS_DIR/NAME.txt. Environment: BUILD_DIR (build/), THREADS (2), ROUNDS (3),
# RESULTS_DIR (bench/results), NAME (bf16_gemm_cpu).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="$(realpath -m "${BUILD_DIR:-$root/build}")"
results="${RESULTS_DIR:-$root/bench/results}"
raw="$results/${NAME:-bf16_gemm_cpu}.txt"
mkdir -p "$results"
cmake --build "$build" --target bench_bf16_gemm -j2 >/dev/null
{
  echo "bf16 GEMM kernels: $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)"
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread)'
  grep -o -w -E 'avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' '
  echo
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$build/bench/bench_bf16_gemm" --threads "${THREADS:-2}" --rounds "${ROUNDS:-3}"
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} 2>&1 | tee "$raw"
