#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, for tests and trying the sbatch script
# (Debian's slurm-wlm and munge: scripts/setup.sh --slurm). Everything it writes lives in
# one directory; nothing under /etc, /run or /var is touched, and the system's own munged
# or Slurm daemons (if any) are left alone.
#
#   scripts/slurm/local_cluster.sh start DIR   # munged, slurmctld, slurmd; waits for an idle node
#   export SLURM_CONF=DIR/slurm.conf           # then sbatch, srun, sinfo, squeue talk to it
#   scripts/slurm/local_cluster.sh stop DIR    # stops the daemons it started (pid files in DIR)
#
# DIR gets: munge/ (a fresh key, socket, pid, log), slurm.conf, state/ and spool/, and
# slurmctld.log / slurmd.log. The node is this host (`hostname -s`) at 127.0.0.1 with the
# CPUs, sockets, cores, threads and memory `slurmd -C` reports; the ports are free ones
# chosen at start, so several clusters (several test runs) can coexist. Built for a
# container: no cgroups (proctrack/linuxproc, task/none), no accounting, SlurmUser and
# SlurmdUser root (the daemons run as the caller, who must be root: slurmd starts jobs as
# their submitting user). MpiDefault=none; srun --mpi=pmix (OpenMPI 4.1 from Debian) works.
#
# CODISTILL_SLURM_OWNER_PID=PID (for tests): a watcher stops the cluster once process PID
# has exited, so that a test killed by its timeout (SIGKILL: no clean-up of its own) leaves
# no daemons behind.
#
# Exit status of start: 0 once `sinfo` shows the node idle; 1 (with the daemons' logs
# on stderr) if a daemon does not come up within CODISTILL_SLURM_START_S seconds (default
# 60); 77 if Slurm or munge is not installed, or the caller is not root ("skipped").
set -uo pipefail

usage() { echo "usage: scripts/slurm/local_cluster.sh start|stop|status DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
action="$1"
dir="$2"

# The daemons started here, in the order they are stopped (slurmd before slurmctld before
# munged: each needs the next one to shut down cleanly).
daemons=(slurmd slurmctld munged)

pid_of() { local f="$dir/$1.pid"; [ -s "$f" ] && cat "$f"; }

# Running, and not a zombie: a daemon that has exited stays a zombie until its parent
# (often pid 1 after the daemon's fork) reaps it, and kill -0 still succeeds on it.
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  local state
  state="$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)"
  [ "$state" != Z ] && [ "$state" != X ]
}

stop() {
  local name pid i
  # The watcher first (unless it is the one stopping): it must not stop a restarted cluster.
  pid="$(pid_of watcher)" && [ "$pid" != "$$" ] && kill -TERM "$pid" 2>/dev/null
  rm -f "$dir/watcher.pid"
  for name in "${daemons[@]}"; do
    pid="$(pid_of "$name")" || continue
    if alive "$pid"; then
      kill -TERM "$pid" 2>/dev/null
      # Up to 10 s for a clean exit, then SIGKILL: a test's clean-up must not hang.
      for ((i = 0; i < 100; i++)); do alive "$pid" || break; sleep 0.1; done
      alive "$pid" && kill -KILL "$pid" 2>/dev/null
    fi
    rm -f "$dir/$name.pid"
  done
  # Jobs outlive the daemons (slurmstepd is made to survive a slurmd restart): a cluster
  # stopped while a job runs (a failed or killed test) leaves slurmstepd and the job's
  # processes. Theirs is this cluster's SLURM_CONF in the environment, with SLURM_JOB_ID
  # for a job's processes (not the caller's shell, which may have exported SLURM_CONF too).
  local conf="SLURM_CONF=$dir/slurm.conf" env_text p
  for p in /proc/[0-9]*; do
    pid="${p#/proc/}"
    [ "$pid" = "$$" ] && continue
    # Processes come and go while we look (and pid 1's is not ours to read): no noise.
    env_text="$( { tr '\0' '\n' <"$p/environ"; } 2>/dev/null)" || continue
    grep -qxF "$conf" <<<"$env_text" || continue
    if [ "$(cat "$p/comm" 2>/dev/null)" = slurmstepd ] || grep -q '^SLURM_JOB_ID=' <<<"$env_text"; then
      kill -KILL "$pid" 2>/dev/null
    fi
  done
  return 0
}

# A TCP port nobody listens on (the kernel picks it); two different ones for the daemons.
free_ports() {
  python3 - <<'PY'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

logs() {
  local f
  for f in "$dir/munge/munged.log" "$dir/slurmctld.log" "$dir/slurmd.log"; do
    [ -f "$f" ] && { echo "--- $f (last 20 lines)"; tail -n 20 "$f"; }
  done
}

start() {
  local tool
  for tool in munged mungekey slurmctld slurmd sinfo sbatch; do
    if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$tool" ]; then
      echo "skipped: $tool is not installed (scripts/setup.sh --slurm)"; exit 77
    fi
  done
  if [ "$(id -u)" -ne 0 ]; then
    echo "skipped: a local Slurm cluster needs root (slurmd runs jobs as their users)"; exit 77
  fi
  export PATH="$PATH:/usr/sbin"
  mkdir -p "$dir" || exit 1
  dir="$(cd "$dir" && pwd -P)"
  stop  # a previous cluster in the same directory; its jobs and state are forgotten
  rm -rf "$dir/state" "$dir/spool"
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool"
  # munged refuses a key directory that others may write to, and warns unless everyone may
  # enter the socket's directory; the key itself is 0600.
  chmod 755 "$dir/munge"

  # munge: its own key and socket. munged checks that the key and its directory are owned
  # by the user it runs as and not writable by others.
  rm -f "$dir/munge/munge.key"
  mungekey --create --keyfile="$dir/munge/munge.key" || { echo "mungekey failed" >&2; exit 1; }
  chmod 600 "$dir/munge/munge.key"
  local socket="$dir/munge/munge.socket"
  munged --force --socket="$socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed" || { echo "munged failed to start" >&2; logs >&2; exit 1; }

  # The node as slurmd sees it: "NodeName=h CPUs=2 Boards=1 SocketsPerBoard=1 ...".
  local host node_line ports ctld_port slurmd_port
  host="$(hostname -s)"
  node_line="$(slurmd -C 2>/dev/null | head -n 1)"
  case "$node_line" in NodeName=*) ;; *) echo "slurmd -C printed no node line: '$node_line'" >&2; stop; exit 1 ;; esac
  node_line="NodeName=$host NodeAddr=127.0.0.1 ${node_line#NodeName=* } State=UNKNOWN"
  read -r ctld_port slurmd_port <<<"$(free_ports)"
  cat >"$dir/slurm.conf" <<EOF
# Written by scripts/slurm/local_cluster.sh for a one-node test cluster.
ClusterName=codistill-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups in a container: processes tracked through /proc, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
$node_line
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  export SLURM_CONF="$dir/slurm.conf"
  # -c: a clean start, without the jobs and nodes of saved state (-i would recover them);
  # both daemons fork and write their pid files.
  slurmctld -c || { echo "slurmctld failed to start" >&2; logs >&2; stop; exit 1; }
  slurmd || { echo "slurmd failed to start" >&2; logs >&2; stop; exit 1; }

  local limit="${CODISTILL_SLURM_START_S:-60}" waited=0 state=""
  while [ "$waited" -lt $((limit * 2)) ]; do
    state="$(sinfo -h -n "$host" -o '%T' 2>/dev/null | head -n 1)"
    [ "$state" = idle ] && break
    sleep 0.5; waited=$((waited + 1))
  done
  if [ "$state" != idle ]; then
    echo "local_cluster.sh: node $host not idle after ${limit}s (state '${state:-none}')" >&2
    logs >&2; stop; exit 1
  fi
  if [ -n "${CODISTILL_SLURM_OWNER_PID:-}" ]; then
    # Its own session, output nowhere: it must not hold the caller's pipes open.
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec "$2" stop "$3"' \
      local-cluster-watcher "$CODISTILL_SLURM_OWNER_PID" "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")" "$dir" \
      </dev/null >/dev/null 2>&1 &
    echo $! >"$dir/watcher.pid"
  fi
  echo "local_cluster.sh: cluster up in $dir (node $host, slurmctld port $ctld_port); export SLURM_CONF=$dir/slurm.conf"
}

case "$action" in
  start) start ;;
  stop)
    [ -d "$dir" ] || exit 0
    dir="$(cd "$dir" && pwd -P)"; stop ;;
  status)
    export SLURM_CONF="$dir/slurm.conf"; PATH="$PATH:/usr/sbin" sinfo ;;
  *) usage ;;
esac
