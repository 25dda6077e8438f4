#!/usr/bin/env bash
# CTest's netfs entries (tests/CMakeLists.txt, label netfs): runs a test executable with its
# scratch folders on a network file system, or reports it skipped when CODISTILL_TEST_SCRATCH
# is not set or not on one (a skip, never a pass: the test would only repeat the local-disk
# run). scripts/run_netfs_tests.sh sets it up.
#   tests/scripts/netfs_ctest.sh TEST_EXE [CATCH2 ARGS...]
set -uo pipefail
scratch="${CODISTILL_TEST_SCRATCH:-}"
skip() {
  echo "netfs test $(basename "$1"):"  # the skip line must follow a line break (CTest's skip regex)
  echo "skipped: $2"
  exit 0
}
[ -n "$scratch" ] || skip "$1" "no network file system: CODISTILL_TEST_SCRATCH is not set (scripts/run_netfs_tests.sh sets it)"
mkdir -p "$scratch" || exit 1
fstype="$(findmnt -n -o FSTYPE --target "$scratch" 2>/dev/null)"
case "$fstype" in
  fuse.glusterfs | nfs | nfs4 | lustre | gpfs | ceph | fuse.ceph | cifs | smb3 | 9p | fuse.sshfs) ;;
  *) skip "$1" "no network file system: CODISTILL_TEST_SCRATCH ($scratch) is on ${fstype:-an unknown file system}" ;;
esac
echo "netfs test: scratch $scratch on $fstype${CODISTILL_TEST_SCRATCH_PEER:+, peer client at $CODISTILL_TEST_SCRATCH_PEER}"
exec "$@"
