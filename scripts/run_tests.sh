#!/usr/bin/env bash
# Set-up, builds and everything CI runs, in stages; works from a clean clone. Every stage
# runs even when an earlier one failed (but tests whose build failed), and the end prints
# each stage's wall time, the 10 slowest tests and the skipped tests by reason; the exit
# status is non-zero when any stage failed or a test skipped for a reason other than a
# missing GPU (scripts/lib/test_report.py).
#   1. set-up          scripts/setup.sh --tools --slurm (apt, the tools' virtual environment)
#   2. build           Release (GCC; CUDA compiled when nvcc exists, one architecture without
#                      a GPU: scripts/build.sh), tests and benchmark programs
#   3. tests           the whole suite through CTest, the SIMT mutants among them (not netfs)
#   3b. tests (netfs)  the store, owner and async chaos tests again on a GlusterFS volume over
#                      loopback (scripts/run_netfs_tests.sh; about a minute); where no volume
#                      can be mounted (no FUSE, glusterd cannot start) SKIPPED, shown with the
#                      reason and not failing CI: like a missing GPU, a missing capability of
#                      the machine, not of the project (its install step is the script's own)
#   4. sanitized build clang, ASan + UBSan, the C++ tests and the fuzz targets
#   5. sanitized tests the C++ tests (library and process tests) under ASan + UBSan
#   6. fuzz            the libFuzzer targets side by side, FUZZ_SECONDS each
#   7. tsan            a TSan trainer pair (its own small build), SIGTERM at the end
# Extra arguments go to the Release build's cmake. JOBS (default: the cores), BUILD_DIR.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
jobs="${JOBS:-$(nproc)}"
reports="$build/test-reports"
names=() seconds=() results=()
rm -f "$reports"/*.xml  # an earlier run's reports must not stand in for this one's
failed=0

# stage NAME COMMAND...: runs it, records its wall time and outcome.
stage() {
  local name="$1" start rc=0
  shift
  echo "==== $name: $(date -u +%H:%M:%S)"
  start=$(date +%s)
  "$@" || rc=$?
  names+=("$name") seconds+=($(($(date +%s) - start)))
  if [ "$rc" -eq 0 ]; then results+=(ok)
  elif [ "$rc" -eq 77 ]; then results+=("SKIPPED (see its skipped: line)")  # the machine lacks what it needs
  else results+=("FAILED ($rc)"); failed=1; fi
  return "$rc"
}

release_tests() {
  mkdir -p "$reports"
  (cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 600 -LE '^netfs' \
     --output-junit "$reports/release.xml" --output-log "$reports/release.log")
}

# --tools: the Python environment the export, plot and TensorBoard tests run in
# (.venv-tools); here they must run, never skip. --slurm: slurm-wlm and munge, for the test
# that starts a real one-node Slurm and submits scripts/slurm/codistill.sbatch; here it must
# run too (CI is root, as the local cluster needs), never skip.
stage "set-up" "$root/scripts/setup.sh" --tools --slurm || exit 1
export CODISTILL_REQUIRE_TOOLS=1 CODISTILL_REQUIRE_SLURM=1
# MPI is optional in the build (CODISTILL_MPI=AUTO), but not here: setup.sh installs it, and
# the mpi process-group tests must run, never skip.
if stage "build (Release)" "$root/scripts/build.sh" -DCODISTILL_MPI=ON "$@"; then
  stage "tests (Release)" release_tests
  stage "tests (netfs)" env CTEST_JUNIT="$reports/netfs.xml" JOBS="$jobs" "$root/scripts/run_netfs_tests.sh" "$build"
fi
mkdir -p "$reports"
if stage "build (ASan+UBSan, fuzz)" env BUILD_ONLY=1 "$root/scripts/run_sanitized_suite.sh"; then
  stage "tests (ASan+UBSan)" env CTEST_JUNIT="$reports/sanitized.xml" "$root/scripts/run_sanitized_suite.sh"
  stage "fuzz" env FUZZ_SECONDS="${FUZZ_SECONDS:-40}" "$root/scripts/run_fuzz.sh"
fi
stage "tsan" "$root/scripts/run_tsan_codistill.sh"

echo
echo "==== stages (wall time)"
total=0
for i in "${!names[@]}"; do
  printf '%-28s %6d s  %5.1f min  %s\n' "${names[$i]}" "${seconds[$i]}" \
    "$(awk "BEGIN{print ${seconds[$i]}/60}")" "${results[$i]}"
  total=$((total + seconds[i]))
done
printf '%-28s %6d s  %5.1f min\n' "total" "$total" "$(awk "BEGIN{print $total/60}")"
junit=()
for f in release netfs sanitized; do [ -f "$reports/$f.xml" ] && junit+=("$f=$reports/$f.xml"); done
if [ ${#junit[@]} -gt 0 ]; then
  /usr/bin/python3 "$root/scripts/lib/test_report.py" "${junit[@]}" || failed=1
fi
exit "$failed"
