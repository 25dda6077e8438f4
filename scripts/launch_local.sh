#!/usr/bin/env bash
# Starts N codistill-train workers of one run on this machine (DESIGN.md section 3):
#   scripts/launch_local.sh [--ranks R] [--first-worker F] CONFIG N [train args...]
# Worker i gets --worker i --workers N and the train args (e.g. --run-dir DIR, --set ...).
# --first-worker F starts workers F..F+N-1 instead (--workers F+N): more workers for a run
# that is already running (add --set model.init_from=peers to start them from the
# freshest peer checkpoint; docs/training.md, "An elastic cohort").
# Groups: with --ranks R (or RANKS=R in the environment) each worker is a synchronous
# data-parallel group of R rank processes (docs/architecture.md section 5), started as
#   mpirun -np R --oversubscribe [--allow-run-as-root] codistill-train ...
# (--allow-run-as-root only when run as root; MPIRUN names another mpirun). So N x R
# processes in all; give them run.threads=1 on a small machine. R = 1 (the default) starts
# each worker as one plain process, without mpirun.
# With several GPUs and --device cuda, workers get cuda:0, cuda:1, ... round-robin.
# Each worker's output goes to RUN_DIR/worker-XXX/stdout.txt (the run directory is read
# from the train args, else from the config) and is summarized here. Ctrl-C / SIGTERM are
# forwarded to every worker (each publishes a checkpoint and stops; mpirun passes it on to
# its ranks, which stop together). Exits non-zero if any worker failed (a group fails
# when any of its ranks does).
set -uo pipefail
ranks="${RANKS:-1}" first=0
while :; do
  case "${1:-}" in
    --ranks) ranks="${2:-}"; shift 2 2>/dev/null || shift ;;
    --ranks=*) ranks="${1#--ranks=}"; shift ;;
    --first-worker) first="${2:-}"; shift 2 2>/dev/null || shift ;;
    --first-worker=*) first="${1#--first-worker=}"; shift ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "usage: scripts/launch_local.sh [--ranks R] [--first-worker F] CONFIG N [codistill-train args...]" >&2
  exit 2
fi
case "$first" in ''|*[!0-9]*) echo "launch_local.sh: --first-worker must be an integer >= 0, got '$first'" >&2; exit 2 ;; esac
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
config="$1"; n="$2"; shift 2
case "$ranks" in ''|*[!0-9]*|0) echo "launch_local.sh: --ranks (RANKS) must be a positive integer, got '$ranks'" >&2; exit 2 ;; esac
case "$n" in ''|*[!0-9]*) echo "launch_local.sh: N must be a positive integer, got '$n'" >&2; exit 2 ;; esac
[ "$n" -ge 1 ] || { echo "launch_local.sh: N must be >= 1" >&2; exit 2; }
[ -f "$config" ] || { echo "launch_local.sh: no config file '$config'" >&2; exit 2; }
exe="${CODISTILL_TRAIN:-${BUILD_DIR:-$root/build}/trainer/codistill-train}"
[ -x "$exe" ] || { echo "launch_local.sh: $exe not built (run scripts/build.sh)" >&2; exit 2; }
launcher=()
if [ "$ranks" -gt 1 ]; then
  mpirun="${MPIRUN:-mpirun}"
  command -v "$mpirun" >/dev/null 2>&1 || {
    echo "launch_local.sh: --ranks $ranks needs $mpirun (OpenMPI: scripts/setup.sh installs openmpi-bin)" >&2; exit 2; }
  # More ranks than cores is normal here (several workers share the machine); OpenMPI
  # refuses root unless told (containers, CI).
  launcher=("$mpirun" -np "$ranks" --oversubscribe)
  [ "$(id -u)" -eq 0 ] && launcher+=(--allow-run-as-root)
fi

# The run directory, for the workers' output files: --run-dir, or run.dir of --set, or the config's.
run_dir=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    --run-dir) run_dir="${args[$((i + 1))]:-}" ;;
    --run-dir=*) run_dir="${args[$i]#--run-dir=}" ;;
    run.dir=*) run_dir="${args[$i]#run.dir=}" ;;
  esac
done
if [ -z "$run_dir" ]; then
  run_dir="$(sed -n 's/^[[:space:]]*dir:[[:space:]]*//p' "$config" | head -n 1)"
  run_dir="${run_dir:-runs/run}"
fi

gpus=0
if printf '%s\n' "$@" | grep -q '^cuda' && command -v nvidia-smi >/dev/null 2>&1; then
  gpus="$(nvidia-smi -L 2>/dev/null | wc -l)"
fi

# Several workers share the cores: OpenMP threads that spin while they wait steal them from
# the other workers (5-40x slowdowns seen on 2 cores), so they sleep instead.
[ $((n * ranks)) -gt 1 ] && export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

pids=()
stop() {
  echo "launch_local.sh: stopping ${#pids[@]} worker(s)" >&2
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
}
trap stop INT TERM

for ((w = first; w < first + n; w++)); do
  out_dir="$run_dir/$(printf 'worker-%03d' "$w")"
  mkdir -p "$out_dir"
  device=()
  [ "$gpus" -gt 1 ] && device=(--device "cuda:$((w % gpus))")
  ${launcher[@]+"${launcher[@]}"} "$exe" --config "$config" --worker "$w" --workers "$((first + n))" "$@" \
    "${device[@]}" >"$out_dir/stdout.txt" 2>&1 &
  pids+=($!)
done
shape="$n worker(s)"; [ "$ranks" -gt 1 ] && shape="$n worker(s) x $ranks ranks (mpirun)"
[ "$first" -gt 0 ] && shape="$shape (workers $first..$((first + n - 1)))"
echo "launch_local.sh: $shape of $config running in $run_dir (pids ${pids[*]})"

failed=0
for ((i = 0; i < n; i++)); do
  w=$((first + i))
  wait "${pids[$i]}"
  rc=$?
  # A signal interrupts wait; wait again for the worker's own exit status.
  while kill -0 "${pids[$i]}" 2>/dev/null; do wait "${pids[$i]}"; rc=$?; done
  out_dir="$run_dir/$(printf 'worker-%03d' "$w")"
  if [ "$rc" -ne 0 ]; then
    failed=1
    echo "launch_local.sh: worker $w failed (exit $rc):" >&2
    tail -n 5 "$out_dir/stdout.txt" >&2
  else
    grep -h '^summary:' "$out_dir/stdout.txt" | sed "s/^/worker $w: /"
  fi
done
exit "$failed"
