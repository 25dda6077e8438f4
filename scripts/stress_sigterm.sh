#!/usr/bin/env bash
# Starts a trainer RUNS times (JOBS at once, RUNS rounded up to a multiple of JOBS), sends
# each SIGTERM a random 0-90 ms after its first checkpoint appears, and counts the exits that
# are not 0 (a clean stop publishes a checkpoint and exits 0); a failing run's directory, with
# its stderr, is kept under OUT. A trainer that ended before the signal counts as failed too.
#   RUNS=300 JOBS=2 BUILD_DIR=build OUT=/tmp/stress-sigterm scripts/stress_sigterm.sh [CONFIG]
# CONFIG (one worker: worker-000's checkpoints are watched) defaults to the process tests' MLP
# (tests/trainer/persist/test_resume_process.cpp's kConfig: batch 64, 256-256 hidden, AdamW, a
# checkpoint every 100 steps). It catches the heap corruption that a SIGTERM handler running
# inside oneDNN's JIT sgemm causes (5 of 600 runs of a trainer that handles the signal on any
# thread, docs/results.md "Stopping with SIGTERM inside oneDNN's sgemm").
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
runs="${RUNS:-300}" jobs="${JOBS:-2}" out="${OUT:-/tmp/stress-sigterm}"
exe="${BUILD_DIR:-$root/build}/trainer/codistill-train"
[ -x "$exe" ] || { echo "stress_sigterm.sh: no trainer at $exe (set BUILD_DIR)" >&2; exit 2; }
mkdir -p "$out"
rm -rf "$out"/job* "$out"/failed-*  # an earlier run's
trap 'pkill -TERM -P $$ 2>/dev/null; pkill -KILL -f -- "--run-dir $out/job" 2>/dev/null' INT TERM
config="${1:-$out/config.yaml}"
if [ $# -eq 0 ]; then
  cat >"$config" <<'YAML'
run: {seed: 5, threads: 2}
data: {kind: synthetic, batch_size: 64, synthetic_train: 8192, synthetic_test: 512, synthetic_shape: [1, 16, 16]}
model: {kind: mlp, hidden: [256, 256], dropout: 0.1}
optimizer: {kind: adamw, lr: 0.001, weight_decay: 0.01, schedule: {kind: cosine, warmup_steps: 50}}
train: {steps: 1500, eval_every: 500, log_every: 100}
checkpoint: {every: 100, keep: 3}
YAML
fi

# One job: runs its share, one trainer at a time; prints "fail" or "ok" per run.
job() {
  local id=$1 n=$2 i d pid k
  for ((i = 1; i <= n; i++)); do
    d="$out/job$id"; rm -rf "$d"; mkdir -p "$d"
    "$exe" --config "$config" --run-dir "$d/run" >"$d/stdout.txt" 2>"$d/stderr.txt" &
    pid=$!
    for ((k = 0; k < 12000; k++)); do  # up to 120 s for the first checkpoint
      compgen -G "$d/run/worker-000/ckpt-*.h5" >/dev/null && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.01
    done
    sleep "0.0$((RANDOM % 10))"
    local signalled=1
    kill -TERM "$pid" 2>/dev/null || signalled=0
    wait "$pid"; local rc=$?
    if [ "$signalled" -eq 0 ]; then
      echo "fail job $id run $i: ended before the signal (exit $rc)"; cp -r "$d" "$out/failed-$id-$i"
    elif [ "$rc" -ne 0 ]; then
      echo "fail job $id run $i: exit $rc"; cp -r "$d" "$out/failed-$id-$i"
    else
      echo ok
    fi
  done
}

per=$(((runs + jobs - 1) / jobs))
for ((j = 0; j < jobs; j++)); do job "$j" "$per" >"$out/job$j.log" & done
wait
total=$(cat "$out"/job*.log | wc -l) failed=$(cat "$out"/job*.log | grep -c '^fail')
grep -h '^fail' "$out"/job*.log
echo "stress_sigterm.sh: $failed of $total runs failed (did not exit 0 after SIGTERM) (load $(cut -d' ' -f1-3 /proc/loadavg))"
[ "$failed" -eq 0 ]
