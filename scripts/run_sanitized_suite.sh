#!/usr/bin/env bash
# The C++ test suite under AddressSanitizer + UndefinedBehaviorSanitizer, in a separate
# CPU-only clang build (SAN_BUILD_DIR, default build-sanitize/; scripts/lib/sanitized_build.sh):
# every library, executable and test is instrumented, so the process tests run sanitized
# trainers too, and the CUDA kernels run under the SIMT executor with every access checked
# (out-of-bounds global and shared memory, misaligned vector loads and stores, signed
# overflow in indexing). Not here: the Python script tests (label python: they test the
# scripts, and run the same trainers the process tests already run sanitized) and the SIMT
# mutants (label simt_mutant: they expect failures). The same build holds the fuzz targets
# (scripts/run_fuzz.sh). Then three probes prove that the sanitizers see kernel accesses.
#   SAN_BUILD_DIR, JOBS; SAN_TESTS=regex runs only the matching CTest tests;
#   CTEST_JUNIT=FILE writes CTest's JUnit report there (scripts/run_tests.sh reads it);
#   BUILD_ONLY=1 builds and stops (scripts/run_tests.sh times the build as a stage of its own).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SAN_BUILD_DIR:-$root/build-sanitize}"
jobs="${JOBS:-$(nproc)}"
# shellcheck source=lib/sanitized_build.sh
. "$root/scripts/lib/sanitized_build.sh"
sanitized_build_configure "$build"
cmake --build "$build" -j "$jobs"
[ "${BUILD_ONLY:-0}" = 1 ] && exit 0
# Leaks are reported (libhdf5 is told not to clean up at exit, but what it holds stays
# reachable); a sanitizer report fails the test that caused it.
# allocator_may_return_null: a huge allocation returns null as without ASan, so the
# out-of-memory tests see the trainer's own error, not ASan's report.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0:allocator_may_return_null=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
status=0
(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 900 -LE 'python|simt_mutant|netfs' \
  ${SAN_TESTS:+-R "$SAN_TESTS"} ${CTEST_JUNIT:+--output-junit "$CTEST_JUNIT"}) || status=1
# The sanitizers must see kernel accesses: each probe mode has to be caught.
for probe in overflow:heap-buffer-overflow misaligned:"misaligned address" shared:heap-buffer-overflow; do
  mode="${probe%%:*}" expect="${probe#*:}"
  if out="$("$build/tests/simt_sanitizer_probe" "$mode" 2>&1)"; then
    echo "run_sanitized_suite.sh: the sanitizers missed '$mode'" >&2; status=1
  elif ! grep -q "$expect" <<<"$out"; then
    echo "run_sanitized_suite.sh: '$mode' failed without '$expect':" >&2; echo "$out" | tail -5 >&2; status=1
  else
    echo "== probe $mode: caught ($expect)"
  fi
done
exit $status
