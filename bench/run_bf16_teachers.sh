#!/usr/bin/env bash
# Teachers with bf16 matrices (codistill.teacher_weights: bf16) against float32 ones, on the
# CPU, both with bf16 products (codistill.teacher_precision: bf16):
#  1. memory: one GPT-2-124M-shaped teacher per process (bench_teacher_memory: the arena's
#     bytes per parameter, the resident set once placed and after FORWARDS forwards of one
#     1024-token window, the forward's time);
#  2. the teacher overhead of a training step with K = 0, 1, 2 (bench/run_teacher_overhead.sh)
#     on OVERHEAD_CONFIG (default configs/text_gpt.yaml: 124M is seconds per step on 2 cores),
#     with float32 and with bf16 teacher weights.
# Raw output, with the CPU model and the load average (a shared machine: times are noisy), to
# RESULTS_DIR/NAME.txt. Environment: BUILD_DIR (build/), THREADS (2), FORWARDS (3), STEPS (60),
# REPEATS (2), DATA (the text config's data.path, absolute; default data/python-docs),
# RESULTS_DIR (bench/results), NAME (bf16_teachers), SKIP_MEMORY=1, SKIP_OVERHEAD=1.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="$(realpath -m "${BUILD_DIR:-$root/build}")"
results="${RESULTS_DIR:-$root/bench/results}"
raw="$results/${NAME:-bf16_teachers}.txt"
threads="${THREADS:-2}"
mkdir -p "$results"
: >"$raw"
log() { tee -a "$raw"; }
{
  echo "bf16 teachers: $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)"
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Flags)' | sed 's/^Flags:.*\(avx512_bf16\).*/Flags: ... \1 .../'
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) (a shared machine: times are noisy)"
} | log

if [ "${SKIP_MEMORY:-0}" != 1 ]; then
  echo "== memory: one GPT-2-124M-shaped teacher (V 50304, T 1024, D 768, 12 layers, tied head), $threads threads" | log
  for w in float32 bf16; do
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" | log
    "$build/bench/bench_teacher_memory" --weights "$w" --threads "$threads" --forwards "${FORWARDS:-3}" 2>&1 | log
  done
fi

if [ "${SKIP_OVERHEAD:-0}" != 1 ]; then
  cfg_in="${OVERHEAD_CONFIG:-configs/text_gpt.yaml}"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  cfg="$tmp/$(basename "$cfg_in")"
  data="${DATA:-$root/data/python-docs}"
  sed "s#^  path: .*#  path: $data#" "$cfg_in" >"$cfg"
  for w in float32 bf16; do
    echo "== teacher overhead: $cfg_in, teacher_weights $w (teacher_precision bf16)" | log
    SKIP_BUILD=1 BUILD_DIR="$build" THREADS="$threads" REPEATS="${REPEATS:-2}" STEPS="${STEPS:-60}" \
      RESULTS_DIR="$tmp" NAME="overhead_$w" \
      EXTRA_ARGS="--set codistill.teacher_precision=bf16 --set codistill.teacher_weights=$w" \
      "$root/bench/run_teacher_overhead.sh" "$cfg" >/dev/null 2>&1 || echo "run_teacher_overhead.sh failed" | log
    cat "$tmp/overhead_$w.txt" | log
  done
fi
