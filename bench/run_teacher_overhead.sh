#!/usr/bin/env bash
# Codistillation overhead per teacher on the CPU: worker 0 of a run trains a config alone
# (K = 0) and with K = 1, 2 peers' checkpoints as teachers, everything else equal, and the
# step time with K teachers is compared with the step time alone:
#   overhead per teacher = (step_K / step_0 - 1) / K
#   bench/run_teacher_overhead.sh [CONFIG...]   (default: configs/fmnist_mlp.yaml configs/fmnist_resnet8.yaml)
# The peers' checkpoints come from short runs of workers 1..K of the same config (only
# their parameters matter, the teachers' cost does not depend on their accuracy). The runs
# alternate K = 0, 1, 2 round by round (REPEATS rounds) on a shared, noisy machine; the load
# average is recorded before and after each. Throughput is codistill's own
# `done.train_examples_per_s` (the step loop, evaluation excluded; teacher reloads, which
# happen every codistill.reload_every steps, are part of it). Also printed: the teacher's
# share of the training FLOPs counted from the model (forward GEMM/conv work over
# forward + backward), the floor the overhead meets when a teacher forward runs exactly as
# fast per FLOP as the student's own step.
# Writes RESULTS_DIR/NAME.json and .txt (raw output).
# Environment: THREADS (2), REPEATS (3), KS ("0 1 2"), STEPS (per config: 3000 for the MLP,
#   300 otherwise), BUILD_DIR (build/), SKIP_BUILD=1, RESULTS_DIR (bench/results), NAME
#   (teacher_overhead_cpu), EXTRA_ARGS (more arguments for every measured run, e.g.
#   "--set codistill.teacher_precision=bf16": teachers' forwards in bf16).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="$(realpath -m "${BUILD_DIR:-$root/build}")"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  BUILD_DIR="$build" "$root/scripts/build.sh" >/dev/null
fi
train="$build/trainer/codistill-train"
[ -x "$train" ] || { echo "run_teacher_overhead.sh: no $train" >&2; exit 1; }
threads="${THREADS:-2}"
repeats="${REPEATS:-3}"
ks="${KS:-0 1 2}"
results="${RESULTS_DIR:-$root/bench/results}"
configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(configs/fmnist_mlp.yaml configs/fmnist_resnet8.yaml)
kmax=0
for k in $ks; do [ "$k" -gt "$kmax" ] && kmax=$k; done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$results"
name_out="${NAME:-teacher_overhead_cpu}"
raw="$results/$name_out.txt"
read -ra extra <<<"${EXTRA_ARGS:-}"
: >"$raw"
log() { tee -a "$raw"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
common=(--set "run.threads=$threads" --set train.eval_every=0 --set checkpoint.every=0)
echo "teacher overhead: K in {$ks}, $repeats rounds, $threads threads; $train; extra args: ${EXTRA_ARGS:-none}" | log

runs="$work/runs.tsv"
: >"$runs"
for cfg in "${configs[@]}"; do
  name="$(basename "$cfg" .yaml)"
  steps="${STEPS:-}"
  [ -z "$steps" ] && { case "$name" in *mlp*) steps=3000 ;; *) steps=300 ;; esac; }
  for ((p = 1; p <= kmax; p++)); do
    "$train" --config "$cfg" --run-dir "$work/$name-peers" --worker "$p" --workers $((kmax + 1)) \
      "${common[@]}" --set train.steps=10 --set data.test_limit=500 >/dev/null 2>&1
  done
  for ((r = 1; r <= repeats; r++)); do
    for k in $ks; do
      rdir="$work/$r/$name-k$k"
      mkdir -p "$rdir"
      codistill=(--set codistill.enabled=false --workers 1)
      if [ "$k" -gt 0 ]; then
        codistill=(--set codistill.enabled=true --set codistill.burn_in=0 --workers $((k + 1)))
        for ((p = 1; p <= k; p++)); do
          peer="$(printf 'worker-%03d' "$p")"
          mkdir -p "$rdir/$peer"
          cp "$work/$name-peers/$peer"/ckpt-*.h5 "$rdir/$peer/"
        done
      fi
      lb="$(loadavg)"
      "$train" --config "$cfg" --run-dir "$rdir" --worker 0 "${common[@]}" "${codistill[@]}" "${extra[@]}" \
        --set "train.steps=$steps" --set train.log_every=$((steps / 3)) --set data.shard=full \
        >"$rdir.out" 2>&1 || { cat "$rdir.out" >&2; exit 1; }
      la="$(loadavg)"
      eps="$(grep '"done"' "$rdir/worker-000/metrics.jsonl" | /usr/bin/python3 -c \
        'import json,sys; print(json.loads(sys.stdin.read())["train_examples_per_s"])')"
      loaded="$(grep -c '"event":"teacher"' "$rdir/worker-000/metrics.jsonl" || true)"
      echo "round $r $name K=$k: $eps ex/s ($steps steps, teacher loads $loaded; load $lb -> $la)" | log
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$cfg" "$k" "$eps" "$lb" "$la" "$steps" >>"$runs"
    done
  done
done

/usr/bin/python3 "$root/bench/teacher_overhead_report.py" "$runs" "$raw" "$results/$name_out.json" \
  "$threads" "$repeats" "$build"
