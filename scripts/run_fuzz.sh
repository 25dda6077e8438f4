#!/usr/bin/env bash
# Fuzzes the checkpoint reader, the IDX readers, the token file and token shard readers, the
# .npy/.npz readers and the tokenizer.json reader with libFuzzer (clang from Debian) for a
# bounded time, all targets side by side, under AddressSanitizer + UBSan, starting from the
# committed seed corpora in fuzz/corpus/ (new interesting inputs accumulate in
# BUILD_DIR/corpus/, which is not committed). The targets live in the
# sanitized build that scripts/run_sanitized_suite.sh also uses (scripts/lib/sanitized_build.sh),
# so CI compiles them once. Prints each target's executions; exits non-zero when a target
# crashed, hung (over FUZZ_TIMEOUT seconds on one input) or left an HDF5 object open; the
# input is saved in BUILD_DIR/artifacts/. Leaks inside libhdf5 itself are not reported
# (-detect_leaks=0): it loses memory on some malformed files, which this project cannot fix.
#   FUZZ_SECONDS (default 60) per target, FUZZ_TIMEOUT (default 10), FUZZ_TARGETS
#   (default "idx token_file checkpoint npy tokenizer_json token_shard"), FUZZ_BUILD_DIR
#   (default: SAN_BUILD_DIR or build-sanitize), JOBS.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FUZZ_BUILD_DIR:-${SAN_BUILD_DIR:-$root/build-sanitize}}"
seconds="${FUZZ_SECONDS:-60}"
timeout_s="${FUZZ_TIMEOUT:-10}"
targets="${FUZZ_TARGETS:-idx token_file checkpoint npy tokenizer_json token_shard}"
jobs="${JOBS:-$(nproc)}"
# shellcheck source=lib/sanitized_build.sh
. "$root/scripts/lib/sanitized_build.sh"
sanitized_build_configure "$build"
build_targets=()
for t in $targets; do build_targets+=(--target "fuzz_$t"); done
cmake --build "$build" -j "$jobs" "${build_targets[@]}"
# -detect_leaks=0 stops libFuzzer's per-input leak checks only; LeakSanitizer would still
# report libhdf5's own lost memory at exit (it cannot be freed from here), so it is off.
export ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
mkdir -p "$build/artifacts"
declare -A pids
for t in $targets; do
  mkdir -p "$build/corpus/$t"
  "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout="$timeout_s" -detect_leaks=0 \
    -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t-" "$build/corpus/$t" "$root/fuzz/corpus/$t" \
    >"$build/fuzz_$t.log" 2>&1 &
  pids[$t]=$!
done
status=0
for t in $targets; do
  rc=0
  wait "${pids[$t]}" || rc=$?
  log="$build/fuzz_$t.log"
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' || true)
  echo "== fuzz_$t: ${runs:-?} executions in ${seconds}s, exit $rc"
  if [ "$rc" -ne 0 ]; then
    status=1
    grep -E "ERROR|SUMMARY|left open|artifact" "$log" | head -5 >&2
  fi
done
exit $status
