#!/usr/bin/env bash
# The SIMT executor's tests and the CUDA kernels it runs (tests/simt, tests/kernels/cuda_simt)
# under AddressSanitizer + UndefinedBehaviorSanitizer: out-of-bounds global and shared memory
# accesses, misaligned vector loads and stores, signed overflow in index arithmetic.
# A separate CPU-only build (BUILD_DIR, default build-sanitize/) of just those tests.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SAN_BUILD_DIR:-$root/build-sanitize}"
jobs="${JOBS:-$(nproc)}"
mkdir -p "$build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCODISTILL_CUDA=OFF \
  -DCODISTILL_BENCH=OFF -DCODISTILL_SANITIZE=address,undefined >"$build/configure.log" 2>&1 || {
  cat "$build/configure.log" >&2; echo "run_simt_sanitized.sh: cmake failed" >&2; exit 1; }
# The test executables of the two folders (one per test_*.cpp).
mapfile -t targets < <(cd "$root/tests" && find simt kernels/cuda_simt -name 'test_*.cpp' \
  2>/dev/null | xargs -r -n1 basename | sed 's/\.cpp$//' | sort)
[ "${#targets[@]}" -gt 0 ] || { echo "run_simt_sanitized.sh: no tests found" >&2; exit 1; }
cmake --build "$build" -j "$jobs" --target "${targets[@]}" simt_sanitizer_probe
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
status=0
for t in "${targets[@]}"; do
  echo "== $t (ASan+UBSan)"
  "$build/tests/$t" || { echo "run_simt_sanitized.sh: $t failed" >&2; status=1; }
done
# The sanitizers must see kernel accesses: each probe mode has to be caught.
for probe in overflow:heap-buffer-overflow misaligned:"misaligned address" shared:heap-buffer-overflow; do
  mode="${probe%%:*}" expect="${probe#*:}"
  if out="$("$build/tests/simt_sanitizer_probe" "$mode" 2>&1)"; then
    echo "run_simt_sanitized.sh: the sanitizers missed '$mode'" >&2; status=1
  elif ! grep -q "$expect" <<<"$out"; then
    echo "run_simt_sanitized.sh: '$mode' failed without '$expect':" >&2; echo "$out" | tail -5 >&2; status=1
  else
    echo "== probe $mode: caught ($expect)"
  fi
done
exit $status
