#!/usr/bin/env bash
# ThreadSanitizer over the trainer's threads: a CPU-only clang TSan build of codistill-train
# (build-tsan/, -O1 with line tables, function multiversioning off), then a 2-worker codistillation with
# asynchronous checkpoints every 20 steps and teacher reloads every 10 (the background
# checkpoint writer, the snapshot copier and the peer loads all busy), stopped by SIGTERM.
# Fails on any ThreadSanitizer report or a worker that does not exit 0.
# Environment: TSAN_SECONDS (default 30) how long the workers train; JOBS build jobs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TSAN_BUILD_DIR:-$root/build-tsan}"
jobs="${JOBS:-$(nproc)}"
seconds="${TSAN_SECONDS:-30}"
# shellcheck source=lib/sanitized_build.sh
. "$root/scripts/lib/sanitized_build.sh"
clang_configure "$build" -DCODISTILL_TESTS=OFF -DCODISTILL_SANITIZE=thread
cmake --build "$build" -j "$jobs" --target codistill-train
exe="$build/trainer/codistill-train"
nm "$exe" | grep __tsan_func_entry >/dev/null || { echo "run_tsan_codistill.sh: $exe is not TSan-instrumented" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat >"$work/c.yaml" <<'YAML'
run:
  seed: 4
  threads: 1
  workers: 2
data:
  kind: synthetic
  batch_size: 64
  synthetic_train: 4096
  synthetic_test: 256
  synthetic_shape: [1, 16, 16]
model:
  kind: mlp
  hidden: [128, 128]
optimizer:
  kind: sgd
  lr: 0.05
train:
  steps: 1000000
  eval_every: 200
  log_every: 50
checkpoint:
  every: 20
  keep: 3
  async: true
codistill:
  enabled: true
  burn_in: 20
  reload_every: 10
YAML
# One OpenMP thread: the OpenMP runtime is not instrumented, and its pool would only add noise.
export OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1${TSAN_OPTIONS:+ $TSAN_OPTIONS}"
pids=()
for w in 0 1; do
  "$exe" --config "$work/c.yaml" --run-dir "$work/run" --worker "$w" >"$work/w$w.out" 2>"$work/w$w.err" &
  pids+=($!)
done
sleep "$seconds"
kill -TERM "${pids[@]}"
status=0
for w in 0 1; do
  rc=0; wait "${pids[$w]}" || rc=$?
  reports=$(grep -c "WARNING: ThreadSanitizer" "$work/w$w.err" || true)
  teachers=$(grep -c '"event":"teacher"' "$work/run/worker-00$w/metrics.jsonl" || true)
  ckpts=$(grep -c '"event":"checkpoint"' "$work/run/worker-00$w/metrics.jsonl" || true)
  echo "== worker $w: exit $rc, $ckpts checkpoints, $teachers teacher loads, $reports TSan reports"
  if [ "$rc" -ne 0 ] || [ "$reports" -ne 0 ] || [ "$teachers" -eq 0 ]; then
    status=1; sed -n '1,200p' "$work/w$w.err" >&2
  fi
done
exit $status
