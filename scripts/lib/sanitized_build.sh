# Sourced by the scripts that build with sanitizers (run_sanitized_suite.sh, run_fuzz.sh,
# run_tsan_codistill.sh). Clang, not GCC: an instrumented translation unit compiles about
# 5x faster (persist/checkpointing.cpp with ASan + UBSan: 62 s with GCC at -O2 -g, 13 s
# with clang at -O1 and line tables), and only clang has libFuzzer. -O1 and line tables
# (CMakeLists.txt) are what the sanitizers' reports need.

#   clang_configure DIR CMAKE_ARGS...   configures DIR with clang, -O1; a folder made by
#                                       another compiler is started afresh (CMake cannot
#                                       switch compilers); Ninja where it is installed
clang_configure() {
  local root build generator=()
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  build="$1"; shift
  command -v clang++ >/dev/null || { echo "sanitized build: clang++ is needed (scripts/setup.sh)" >&2; return 1; }
  if [ -f "$build/CMakeCache.txt" ] && ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$build/CMakeCache.txt"; then
    rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
  fi
  mkdir -p "$build"
  [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null && generator=(-G Ninja)
  # -Wno-pass-failed: the instrumentation keeps clang from vectorizing the `omp simd` loops,
  # which it would otherwise report once per loop and ISA copy.
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS="-Wno-pass-failed" \
    -DCODISTILL_CUDA=OFF -DCODISTILL_BENCH=OFF "$@" >"$build/configure.log" 2>&1 || {
    cat "$build/configure.log" >&2; echo "sanitized build: cmake failed in $build" >&2; return 1; }
}

#   sanitized_build_configure DIR   the one build that serves the sanitized suite and the
#                                   fuzz targets: ASan + UBSan over every library,
#                                   executable and test (CPU only; the CUDA kernels run
#                                   under the SIMT executor), and the libFuzzer targets
sanitized_build_configure() {
  clang_configure "$1" -DCODISTILL_MPI=ON -DCODISTILL_FUZZ=ON -DCODISTILL_SANITIZE=address,undefined
}
