#!/usr/bin/env bash
# Set-up, build and the whole test suite through CTest. Works from a clean clone.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# --tools: the Python environment the export, plot and TensorBoard tests run in
# (.venv-tools); here they must run, never skip. --slurm: slurm-wlm and munge, for the test
# that starts a real one-node Slurm and submits scripts/slurm/codistill.sbatch; here it must
# run too (CI is root, as the local cluster needs), never skip.
"$root/scripts/setup.sh" --tools --slurm
export CODISTILL_REQUIRE_TOOLS=1 CODISTILL_REQUIRE_SLURM=1
# MPI is optional in the build (CODISTILL_MPI=AUTO), but not here: setup.sh installs it, and
# the mpi process-group tests must run, never skip.
"$root/scripts/build.sh" -DCODISTILL_MPI=ON "$@"
cd "${BUILD_DIR:-$root/build}"
ctest --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 600
# The whole suite again with AddressSanitizer + UBSan (CUDA kernels under the SIMT executor,
# sanitized trainers in the process tests).
"$root/scripts/run_sanitized_suite.sh"
# The trainer's threads under ThreadSanitizer: a 2-worker codistillation, SIGTERM at the end.
"$root/scripts/run_tsan_codistill.sh"
# libFuzzer on the checkpoint and IDX readers, a bounded time each (fuzz/README.md).
FUZZ_SECONDS="${FUZZ_SECONDS:-40}" "$root/scripts/run_fuzz.sh"
