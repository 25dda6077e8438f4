#!/usr/bin/env bash
# Fuzzes the checkpoint reader, the IDX readers and the token file reader with libFuzzer
# (clang from Debian) for a bounded time each, under AddressSanitizer + UBSan, starting
# from the committed seed corpora in fuzz/corpus/ (new interesting inputs accumulate in
# BUILD_DIR/corpus/, which is not committed). Prints each target's executions; exits
# non-zero when a target crashed, hung (over FUZZ_TIMEOUT seconds on one input) or left an
# HDF5 object open; the input is saved in BUILD_DIR/artifacts/. Leaks inside libhdf5
# itself are not reported (-detect_leaks=0): it loses memory on some malformed files,
# which this project cannot fix.
#   FUZZ_SECONDS (default 60) per target, FUZZ_TIMEOUT (default 10), FUZZ_TARGETS
#   (default "idx token_file checkpoint"), FUZZ_BUILD_DIR (default build-fuzz), JOBS.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${FUZZ_SECONDS:-60}"
timeout_s="${FUZZ_TIMEOUT:-10}"
targets="${FUZZ_TARGETS:-idx token_file checkpoint}"
jobs="${JOBS:-$(nproc)}"
command -v clang++ >/dev/null || { echo "run_fuzz.sh: clang++ is needed (apt-get install clang)" >&2; exit 1; }
mkdir -p "$build"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCODISTILL_CUDA=OFF -DCODISTILL_BENCH=OFF -DCODISTILL_TESTS=OFF -DCODISTILL_FUZZ=ON \
  -DCODISTILL_SANITIZE=address,undefined -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link \
  >"$build/configure.log" 2>&1 || { cat "$build/configure.log" >&2; exit 1; }
# -detect_leaks=0 stops libFuzzer's per-input leak checks only; LeakSanitizer would still
# report libhdf5's own lost memory at exit (it cannot be freed from here), so it is off.
export ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
status=0
for t in $targets; do
  cmake --build "$build" -j "$jobs" --target "fuzz_$t"
  mkdir -p "$build/corpus/$t" "$build/artifacts"
  log="$build/fuzz_$t.log"
  rc=0
  "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout="$timeout_s" -detect_leaks=0 \
    -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t-" "$build/corpus/$t" "$root/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' || true)
  echo "== fuzz_$t: ${runs:-?} executions in ${seconds}s, exit $rc"
  if [ "$rc" -ne 0 ]; then
    status=1
    grep -E "ERROR|SUMMARY|left open|artifact" "$log" | head -5 >&2
  fi
done
exit $status
