#!/usr/bin/env bash
# Runs a process test with its scratch folder on a network volume and each trainer worker
# reaching it through a different client (mount) of that volume, as workers on different
# nodes would. Manual, needs root (mount namespaces); not a CTest test.
#
#   tests/scripts/netfs_multiclient.sh BUILD_DIR MOUNT CLIENT0 [CLIENT1 ...] -- TEST_EXE [ARGS]
#
# MOUNT, CLIENT0, ... are mounts of one volume (scripts/netfs.sh mount, once each). The test
# runs in a private mount namespace with TMPDIR=MOUNT/tmp (tests/support/process.hpp's
# TempDir honours it: std::filesystem::temp_directory_path), so the test process itself uses
# MOUNT. BUILD_DIR/trainer/codistill-train (the path compiled into the tests as
# CODISTILL_BINARY_DIR) and /usr/bin/setpriv (the chaos test runs workers as nobody through
# it) are replaced, in that namespace only, by a wrapper: a process started with
# `--worker N` gets a namespace of its own in which MOUNT is CLIENT(N mod count), then runs
# the real program with the same pid (exec all the way, so kill -9 hits the trainer).
# BUILD_DIR may be a copy of a build whose tests were compiled with another
# CODISTILL_BINARY_DIR: set CODISTILL_TEST_BINARY_DIR to the compiled-in path and it is
# bound to BUILD_DIR in the namespace.
set -euo pipefail

if [ "${1:-}" = --wrapper ]; then  # the wrapper: --wrapper REAL MOUNT CLIENTS... -- PROGRAM ARGS
  shift
  real="$1" mnt="$2"
  shift 2
  clients=()
  while [ "$1" != -- ]; do clients+=("$1"); shift; done
  shift
  worker=0 prev=
  for arg in "$@"; do
    [ "$prev" = --worker ] && worker="$arg"
    prev="$arg"
  done
  if [ -z "${CODISTILL_NETFS_CLIENT:-}" ] && [ "$(id -u)" -eq 0 ]; then
    client="${clients[$((worker % ${#clients[@]}))]}"
    export CODISTILL_NETFS_CLIENT="$client"
    # shellcheck disable=SC2016  # expanded by the inner sh
    exec unshare -m --propagation private sh -c 'mount --bind "$1" "$2" && shift 2 && exec "$@"' _ \
      "$client" "$mnt" "$real" "$@"
  fi
  exec "$real" "$@"
fi

[ $# -ge 5 ] || { sed -n 2,20p "$0" >&2; exit 2; }
build="$(realpath "$1")" mnt="$(realpath "$2")"
shift 2
clients=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do clients+=("$(realpath "$1")"); shift; done
[ "${1:-}" = -- ] && shift
{ [ ${#clients[@]} -ge 1 ] && [ $# -ge 1 ]; } || { echo "netfs_multiclient.sh: no clients or no test command" >&2; exit 2; }
self="$(realpath "$0")"
side="$(mktemp -d /tmp/netfs-multiclient.XXXXXX)"
chmod 755 "$side"  # the wrappers run as nobody too
trap 'rm -rf "$side"' EXIT
mkdir -p "$mnt/tmp"
chmod 1777 "$mnt/tmp"

# Inside the namespace: keep the real programs reachable at side paths, put wrappers in
# their place, run the test.
inner() {
  local build="$1" mnt="$2" side="$3" self="$4" nclients="$5"
  shift 5
  local clients=("${@:1:$nclients}")
  shift "$nclients"
  if [ -n "${CODISTILL_TEST_BINARY_DIR:-}" ] && [ "$CODISTILL_TEST_BINARY_DIR" != "$build" ]; then
    mount --bind "$build" "$CODISTILL_TEST_BINARY_DIR"
    build="$CODISTILL_TEST_BINARY_DIR"
  fi
  local prog wrapper
  for prog in "$build/trainer/codistill-train" /usr/bin/setpriv; do
    local name
    name="$(basename "$prog")"
    touch "$side/$name.real"
    mount --bind "$prog" "$side/$name.real"
    wrapper="$side/$name.wrapper"
    {
      echo '#!/bin/sh'
      printf 'exec %q --wrapper %q %q' "$self" "$side/$name.real" "$mnt"
      printf ' %q' "${clients[@]}"
      echo ' -- "$@"'
    } >"$wrapper"
    chmod 755 "$wrapper"
    mount --bind "$wrapper" "$prog"
  done
  cd /
  TMPDIR="$mnt/tmp" exec "$@"
}
export -f inner
unshare -m --propagation private bash -c 'inner "$@"' _ "$build" "$mnt" "$side" "$self" "${#clients[@]}" \
  "${clients[@]}" "$@"
