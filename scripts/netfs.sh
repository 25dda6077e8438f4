#!/usr/bin/env bash
# A network file system over loopback, for running the process tests with their run
# directory on it: a single-brick GlusterFS volume (Debian 12's glusterfs-server 10.3)
# served by glusterd on this host, mounted with the GlusterFS FUSE client. Each `mount`
# is a separate client (its own glusterfs process and caches), as another node would be.
#
#   scripts/netfs.sh install     apt packages (glusterfs-server, glusterfs-client, attr); idempotent
#   scripts/netfs.sh mount DIR   starts glusterd and the volume if needed, mounts it at DIR
#   scripts/netfs.sh umount DIR  unmounts DIR; the last mount gone, the volume is stopped and
#                                deleted, its brick wiped and a glusterd started here stopped
#   scripts/netfs.sh check       exit 0 if a mount can be made here (it mounts and unmounts
#                                one), 2 with the reason on stderr otherwise
#
# The volume is scratch: its contents go with its last mount. Client options are GlusterFS
# 10's defaults (attribute-timeout=1, entry-timeout=1, negative-timeout=0; the volume's
# performance.* translators as `gluster volume create` sets them: write-behind, open-behind,
# quick-read, stat-prefetch/md-cache with md-cache-timeout 1 s, no cache-invalidation),
# which is what a deployment that does not tune them runs. CODISTILL_NETFS_MOUNT_OPTS adds
# mount options (comma-separated, as for mount -o). CODISTILL_NETFS_GROUPS applies gluster's
# option groups (/var/lib/glusterd/groups/) to the volume at each mount, e.g.
# "metadata-cache,nl-cache": the tuning Gluster recommends for small-file workloads (metadata
# and negative lookups cached 600 s, kept right by the server's cache-invalidation upcalls).
# Environment: CODISTILL_NETFS_VOLUME (default codistill), CODISTILL_NETFS_STATE (default
# /var/lib/codistill-netfs: the brick and a marker of a glusterd started here),
# CODISTILL_NETFS_HOST (default this host's name: `gluster volume create` refuses a brick
# given as localhost or 127.0.0.1 ("Please provide a valid hostname/ip other than localhost,
# 127.0.0.1 or loopback address"), but takes a name that resolves to 127.x, so the traffic
# stays on loopback). Needs root (glusterd, FUSE mounts).
# Each subcommand prints how long it took on stderr.
set -uo pipefail

volume="${CODISTILL_NETFS_VOLUME:-codistill}"
state="${CODISTILL_NETFS_STATE:-/var/lib/codistill-netfs}"
brick="$state/brick"
marker="$state/glusterd-started-here.pid"
host="${CODISTILL_NETFS_HOST:-$(hostname)}"
packages=(glusterfs-server glusterfs-client attr)  # attr: setfattr, for check

t0="$(date +%s%N)"
timed_exit() {
  local ms=$((($(date +%s%N) - t0) / 1000000))
  printf 'netfs.sh %s: %d.%03d s\n' "${cmd:-?}" $((ms / 1000)) $((ms % 1000)) >&2
  exit "$1"
}
# In do_mount / do_umount: says why and returns 1 (the caller exits).
err() { echo "netfs.sh: $*" >&2; return 1; }
usage() { echo "usage: scripts/netfs.sh install | mount DIR | umount DIR | check" >&2; exit 2; }

# Bounded: a CLI whose glusterd is gone waits for it.
gluster_cli() { timeout 60 gluster --mode=script "$@"; }

# glusterd answers (its management port 24007).
glusterd_up() { timeout 10 gluster --mode=script pool list >/dev/null 2>&1; }

start_glusterd() {
  glusterd_up && return 0
  mkdir -p "$state"
  glusterd -p "$marker" || return 1
  local i
  for ((i = 0; i < 100; i++)); do glusterd_up && return 0; sleep 0.1; done
  echo "netfs.sh: glusterd did not answer within 10 s (see /var/log/glusterfs/glusterd.log)" >&2
  return 1
}

# The FUSE mounts of our volume now present, one mount point a line.
our_mounts() { awk -v src="$host:/$volume" '$1 == src && $3 == "fuse.glusterfs" {print $2}' /proc/mounts; }

volume_exists() { gluster_cli volume info "$volume" >/dev/null 2>&1; }
volume_started() { gluster_cli volume info "$volume" 2>/dev/null | grep -q '^Status: Started'; }

# A brick left by a volume deleted without its brick wiped (a crash, a reboot of glusterd's
# state) carries the old volume's id and would be refused: wipe it.
fresh_brick() {
  rm -rf "$brick"
  mkdir -p "$brick"
}

start_volume() {
  if ! volume_exists; then
    fresh_brick
    # force: the brick is on the root partition (gluster wants a separate one by default).
    gluster_cli volume create "$volume" transport tcp "$host:$brick" force >/dev/null || return 1
  fi
  local g groups="${CODISTILL_NETFS_GROUPS:-}"
  for g in ${groups//,/ }; do
    gluster_cli volume set "$volume" group "$g" >/dev/null || return 1
  done
  if ! volume_started; then
    gluster_cli volume start "$volume" >/dev/null || gluster_cli volume start "$volume" force >/dev/null || return 1
  fi
}

# Running, and not a zombie (a daemon's parent here may never reap it).
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  local st
  st="$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)"
  [ "$st" != Z ] && [ "$st" != X ]
}

# Runs "$@" and says on stderr how long it took (the teardown's steps).
timed() {
  local t rc
  t=$(date +%s%N)
  "$@"
  rc=$?
  local ms=$((($(date +%s%N) - t) / 1000000))
  printf 'netfs.sh:   %s: %d.%03d s\n' "$*" $((ms / 1000)) $((ms % 1000)) >&2
  return $rc
}

teardown_volume() {
  if volume_exists; then
    volume_started && timed gluster_cli volume stop "$volume" force >/dev/null
    timed gluster_cli volume delete "$volume" >/dev/null
  fi
  timed rm -rf "$brick"
  # glusterd only if this script started it (a system one is left alone).
  if [ -s "$marker" ]; then
    local pid i
    pid="$(cat "$marker")"
    if alive "$pid" && grep -q glusterd "/proc/$pid/comm" 2>/dev/null; then
      echo "netfs.sh:   stopping glusterd (pid $pid)" >&2
      kill -TERM "$pid"
      for ((i = 0; i < 100; i++)); do alive "$pid" || break; sleep 0.1; done
      alive "$pid" && kill -KILL "$pid"
    fi
    rm -f "$marker"
  fi
}

# Why a mount cannot be made here, or nothing.
prerequisites() {
  [ "$(id -u)" -eq 0 ] || { echo "not root (glusterd and FUSE mounts need root)"; return; }
  local b
  for b in glusterd gluster mount.glusterfs; do
    command -v "$b" >/dev/null || { echo "$b not found (scripts/netfs.sh install)"; return; }
  done
  [ -c /dev/fuse ] || { echo "/dev/fuse missing"; return; }
  grep -qw fuse /proc/filesystems || { echo "the kernel has no fuse file system (modprobe fuse)"; return; }
  local addr
  addr="$(getent ahostsv4 "$host" | awk 'NR == 1 {print $1}')"
  [ -n "$addr" ] || { echo "host name '$host' does not resolve (set CODISTILL_NETFS_HOST)"; return; }
  case "$addr" in
    127.*) ;;
    *) ip -o addr 2>/dev/null | grep -qw "inet $addr" || grep -qw "$addr" <(hostname -I 2>/dev/null) ||
         { echo "'$host' resolves to $addr, not an address of this host"; return; } ;;
  esac
  mkdir -p "$state" 2>/dev/null || { echo "cannot create $state"; return; }
  local probe="$state/.xattr-probe"
  if ! { : >"$probe" && setfattr -n trusted.codistill -v 1 "$probe" 2>/dev/null; }; then
    rm -f "$probe"
    echo "the file system of $state has no trusted.* extended attributes (a brick needs them)"
    return
  fi
  rm -f "$probe"
}

do_mount() {
  local dir="$1"
  dir="$(realpath -m -- "$dir")"
  if our_mounts | grep -qxF "$dir"; then
    if stat "$dir" >/dev/null 2>&1; then
      echo "glusterfs $host:/$volume at $dir (already mounted)"
      return 0
    fi
    umount -l "$dir"  # its client died (ENOTCONN): mount again
  fi
  mkdir -p "$dir" || { err "cannot create $dir"; return 1; }
  mountpoint -q "$dir" && { err "$dir is already a mount point (of something else)"; return 1; }
  local why
  why="$(prerequisites)"
  [ -z "$why" ] || { err "$why"; return 1; }
  start_glusterd || { err "cannot start glusterd"; return 1; }
  # A failure from here on leaves nothing behind when no other mount uses the volume.
  start_volume || { err "cannot create or start volume $volume (brick $host:$brick)"; undo_mount "$dir"; return 1; }
  local opts=()
  [ -n "${CODISTILL_NETFS_MOUNT_OPTS:-}" ] && opts=(-o "$CODISTILL_NETFS_MOUNT_OPTS")
  mount -t glusterfs "${opts[@]}" "$host:/$volume" "$dir" ||
    { err "mount -t glusterfs $host:/$volume $dir failed (see /var/log/glusterfs/)"; undo_mount "$dir"; return 1; }
  local i
  for ((i = 0; i < 100; i++)); do our_mounts | grep -qxF "$dir" && stat "$dir" >/dev/null 2>&1 && break; sleep 0.1; done
  our_mounts | grep -qxF "$dir" || { err "$dir did not appear as a glusterfs mount"; undo_mount "$dir"; return 1; }
  chmod 1777 "$dir"  # a scratch root, like /tmp: tests run workers as nobody
  echo "glusterfs $(glusterfs --version | awk 'NR == 1 {print $2}') $host:/$volume at $dir (fuse; $(awk -v d="$dir" '$2 == d {print $4}' /proc/mounts))"
}

undo_mount() {
  do_umount "$1" 2>/dev/null
}

do_umount() {
  local dir="$1"
  dir="$(realpath -m -- "$dir")"
  if our_mounts | grep -qxF "$dir"; then
    # A busy mount (a process still in it) is detached lazily: the client goes when it is free.
    umount "$dir" 2>/dev/null || umount -l "$dir" || { err "cannot unmount $dir"; return 1; }
  fi
  if [ -z "$(our_mounts)" ] && command -v gluster >/dev/null && glusterd_up; then
    teardown_volume
  fi
}

cmd="${1:-}"
case "$cmd" in
  install)
    [ $# -eq 1 ] || usage
    missing=()
    for p in "${packages[@]}"; do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
      echo "netfs.sh: installing ${missing[*]}"
      sudo_cmd=()
      [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
      export DEBIAN_FRONTEND=noninteractive
      "${sudo_cmd[@]}" apt-get update -qq
      "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
        { echo "netfs.sh: apt-get install ${missing[*]} failed" >&2; timed_exit 1; }
      # Debian's package enables a glusterd.service; where systemd runs it is started, which is
      # fine (mount uses it). Nothing else to configure.
    fi
    timed_exit 0
    ;;
  mount)
    [ $# -eq 2 ] || usage
    do_mount "$2"
    timed_exit $?
    ;;
  umount)
    [ $# -eq 2 ] || usage
    do_umount "$2"
    timed_exit $?
    ;;
  check)
    [ $# -eq 1 ] || usage
    why="$(prerequisites)"
    if [ -z "$why" ]; then
      probe_dir="$(mktemp -d /tmp/netfs-check.XXXXXX)"
      if out="$(do_mount "$probe_dir" 2>&1)" && echo ok >"$probe_dir/.check" && [ "$(cat "$probe_dir/.check")" = ok ]; then
        rm -f "$probe_dir/.check"
        (do_umount "$probe_dir") 2>/dev/null
        rmdir "$probe_dir"
        echo "netfs.sh: ok: $out"
        timed_exit 0
      fi
      why="trial mount failed: $out"
      (do_umount "$probe_dir") 2>/dev/null
      rmdir "$probe_dir" 2>/dev/null
    fi
    echo "netfs.sh: no network file system here: $why" >&2
    timed_exit 2
    ;;
  *) usage ;;
esac
