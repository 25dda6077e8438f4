#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer, in a separate
# CPU-only build (SAN_BUILD_DIR, default build-sanitize/): every library, executable and
# test is instrumented, so the process tests run sanitized trainers too, and the CUDA
# kernels run under the SIMT executor with every access checked (out-of-bounds global
# and shared memory, misaligned vector loads and stores, signed overflow in indexing).
# Then three probes prove that the sanitizers see kernel accesses at all.
#   SAN_BUILD_DIR, JOBS; SAN_TESTS=regex runs only the matching CTest tests.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SAN_BUILD_DIR:-$root/build-sanitize}"
jobs="${JOBS:-$(nproc)}"
mkdir -p "$build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCODISTILL_CUDA=OFF \
  -DCODISTILL_BENCH=OFF -DCODISTILL_MPI=ON -DCODISTILL_SANITIZE=address,undefined >"$build/configure.log" 2>&1 || {
  cat "$build/configure.log" >&2; echo "run_sanitized_suite.sh: cmake failed" >&2; exit 1; }
cmake --build "$build" -j "$jobs"
# Leaks are reported (libhdf5 is told not to clean up at exit, but what it holds stays
# reachable); a sanitizer report fails the test that caused it.
# allocator_may_return_null: a huge allocation returns null as without ASan, so the
# out-of-memory tests see the trainer's own error, not ASan's report.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0:allocator_may_return_null=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
status=0
(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 900 ${SAN_TESTS:+-R "$SAN_TESTS"}) || status=1
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
