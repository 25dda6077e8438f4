#!/usr/bin/env bash
# CI's netfs stage: the store, owner and async chaos tests (CTest label netfs) with their run
# directories on a GlusterFS volume served over loopback (scripts/netfs.sh: one brick, two FUSE
# clients, each as another node would be). Client A holds the tests' scratch
# (CODISTILL_TEST_SCRATCH, tests/support/process.hpp); client B reaches the same folder
# (CODISTILL_TEST_SCRATCH_PEER) for the test that removes files through one client while
# the store reads them through the other (tests/checkpoint/test_store_netfs.cpp).
#   scripts/run_netfs_tests.sh [--full] [BUILD_DIR]    (BUILD_DIR: a built tree; default build/)
# --full adds the sync-mode chaos test (label netfs_full, about 80 s more there).
# Exit 0: passed; 1: a test failed; 77: skipped, when no volume can be mounted here (not root,
# no /dev/fuse, glusterd cannot start): it says why on a "skipped: " line. CTEST_JUNIT: a
# JUnit report. Needs root.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
labels='^netfs$'
if [ "${1:-}" = --full ]; then labels='^netfs'; shift; fi
build="$(realpath "${1:-${BUILD_DIR:-$root/build}}")"
[ -f "$build/CTestTestfile.cmake" ] || { echo "run_netfs_tests.sh: $build is not a build tree" >&2; exit 1; }
work="$(mktemp -d /tmp/codistill-netfs.XXXXXX)"
chmod 755 "$work"  # the chaos test runs workers as nobody, who must reach the mounts
a="$work/a" b="$work/b"
cleanup() {
  "$root/scripts/netfs.sh" umount "$b" >/dev/null 2>&1
  "$root/scripts/netfs.sh" umount "$a" 2>&1 | grep -v '^$' >&2
  rmdir "$a" "$b" "$work" 2>/dev/null
}
trap cleanup EXIT

start=$(date +%s)
if ! why="$("$root/scripts/netfs.sh" install 2>&1 >/dev/null && "$root/scripts/netfs.sh" mount "$a" 2>&1 &&
            "$root/scripts/netfs.sh" mount "$b" 2>&1)"; then
  echo "run_netfs_tests.sh:"
  echo "skipped: no GlusterFS mount here: $(grep -v '^netfs.sh [a-z]*: [0-9.]* s$' <<<"$why" | tail -1)"
  exit 77
fi
grep -v '^netfs.sh [a-z]*: [0-9.]* s$' <<<"$why"
mkdir -p "$a/scratch" && chmod 1777 "$a/scratch"  # the chaos test runs workers as nobody
echo "run_netfs_tests.sh: mounted in $(($(date +%s) - start)) s; ctest -L '$labels'"
status=0
(cd "$build" && CODISTILL_TEST_SCRATCH="$a/scratch" CODISTILL_TEST_SCRATCH_PEER="$b/scratch" \
  ctest --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 600 -L "$labels" \
  ${CTEST_JUNIT:+--output-junit "$CTEST_JUNIT"}) || status=1
exit "$status"
