#!/usr/bin/env bash
# Set-up, build and the whole test suite through CTest. Works from a clean clone.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh" "$@"
cd "${BUILD_DIR:-$root/build}"
ctest --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 600
# The CUDA kernels under the SIMT executor again, with AddressSanitizer + UBSan.
"$root/scripts/run_simt_sanitized.sh"
# The trainer's threads under ThreadSanitizer: a 2-worker codistillation, SIGTERM at the end.
"$root/scripts/run_tsan_codistill.sh"
