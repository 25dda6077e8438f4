#!/usr/bin/env bash
# Teacher reloads from teacher files against checkpoints (docs/checkpoint-format.md,
# "Teacher files"): bytes read per reload and reload time, checkpoint vs float32 teacher
# file vs bfloat16 teacher file, for the MLP, the ResNet and the GPT trained with AdamW.
# Per config: one worker trains a few steps (checkpoint at the end), then
# bench/checkpoint/bench_teacher_files.cpp writes the two teacher files from its checkpoint and
# reloads the three kinds in turn, REPEATS rounds, warm and cold (pages dropped).
#   bench/run_teacher_files_bench.sh [CONFIG...]
#     (default: configs/fmnist_mlp.yaml configs/fmnist_resnet8.yaml configs/text_gpt.yaml)
# Environment: REPEATS (5), STEPS (4), BUILD_DIR, RESULTS_DIR (bench/results),
#   NAME (teacher_files_<date>).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source "$root/bench/raw_log.sh"
build="$(realpath -m "${BUILD_DIR:-$root/build}")"
repeats="${REPEATS:-5}"
steps="${STEPS:-4}"
configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(configs/fmnist_mlp.yaml configs/fmnist_resnet8.yaml configs/text_gpt.yaml)
[ -x "$build/bench/bench_teacher_files" ] || { echo "build bench_teacher_files first (CODISTILL_BENCH=ON)" >&2; exit 1; }
open_raw_log "${NAME:-teacher_files_$(date -u +%F)}" "${RESULTS_DIR:-$root/bench/results}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
{
  echo "# teacher files vs checkpoints: bytes read and reload time per teacher reload (read + model rebuilt), AdamW, $repeats rounds alternating"
  echo "# date $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- checkpoint codistill bench || echo -dirty), cpu $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
} | log
for cfg in "${configs[@]}"; do
  name="$(basename "$cfg" .yaml)"
  run="$work/$name"
  "$build/trainer/codistill-train" --config "$cfg" --run-dir "$run" --set optimizer.kind=adamw \
    --set train.steps="$steps" --set checkpoint.every="$steps" --set train.eval_every=0 \
    --set codistill.enabled=false --set checkpoint.teacher_dtype=none >"$run.log" 2>&1 || {
    tail -20 "$run.log" >&2; exit 1; }
  ckpt="$(ls "$run"/worker-000/ckpt-*.h5 | tail -1)"
  echo "## $name ($cfg, --set optimizer.kind=adamw), load $(cut -d' ' -f1-3 /proc/loadavg)" | log
  mkdir -p "$work/files-$name"
  "$build/bench/bench_teacher_files" --ckpt "$ckpt" --dir "$work/files-$name" --repeats "$repeats" | log
done
