#!/usr/bin/env bash
# The memory plan against the measured peak (issue 37, "memory you can plan"): each shipped
# config (configs/*.yaml) runs a few steps on the CPU, with a checkpoint and an evaluation
# inside them, and its two `memory` events (the plan at start, the peak at the end: VmHWM)
# are printed side by side with every line of the plan. Target: plan within 10% of the peak.
#   bench/run_memory_plan.sh [CONFIG...]   (default: every configs/*.yaml)
# Environment: BUILD_DIR (build), STEPS (20), DATA_ROOT (the folder holding python-docs/,
#   default data/), RESULTS_DIR (bench/results), NAME (memory_plan_<date>).
# Configs that need something this machine lacks run with the least change that keeps their
# model: gpt2_124m on python-docs' tokens (its own shards are not here: vocabulary 8192) at batch 1;
# fmnist_mixed_mlp_resnet as its worker 0 alone (codistill off: its peer would be waited
# for); fmnist_distill_mlp_from_resnet with fmnist_resnet8's run of this script as teacher.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source "$root/bench/raw_log.sh"
build="$(realpath -m "${BUILD_DIR:-$root/build}")"
steps="${STEPS:-20}"
data_root="$(realpath -m "${DATA_ROOT:-$root/data}")"
configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(configs/*.yaml)
open_raw_log "${NAME:-memory_plan_$(date -u +%F)}" "${RESULTS_DIR:-$root/bench/results}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
{
  echo "# memory plan vs measured peak (VmHWM), $steps steps per config, checkpoint and evaluation inside them"
  echo "# date $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!bench/results' || echo -dirty), cpu $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), MemTotal $(sed -n 's/^MemTotal: *//p' /proc/meminfo)"
} | log
# Overrides per config (beyond steps, checkpoint and evaluation).
extra_for() {
  case "$1" in
    text_gpt) echo "--set data.path=$data_root/python-docs" ;;
    gpt2_124m) echo "--set data.kind=text --set data.path=$data_root/python-docs --set model.vocab_size=8192 \
--set data.batch_size=1 --set train.eval_batch_size=1024 --set data.test_limit=2" ;;
    fmnist_mixed_mlp_resnet) echo "--set codistill.enabled=false" ;;
    fmnist_distill_mlp_from_resnet) echo "--set codistill.fixed_teachers=[$work/fmnist_resnet8]" ;;
  esac
}
# fmnist_resnet8 first: its run is the fixed teacher of fmnist_distill_mlp_from_resnet.
ordered=()
for cfg in "${configs[@]}"; do [[ "$cfg" == *fmnist_resnet8.yaml ]] && ordered+=("$cfg"); done
for cfg in "${configs[@]}"; do [[ "$cfg" != *fmnist_resnet8.yaml ]] && ordered+=("$cfg"); done
for cfg in "${ordered[@]}"; do
  name="$(basename "$cfg" .yaml)"
  s="$steps"
  [ "$name" = gpt2_124m ] && s=2
  # shellcheck disable=SC2046
  "$build/trainer/codistill-train" --config "$cfg" --run-dir "$work/$name" --set train.steps="$s" \
    --set checkpoint.every="$((s / 2))" --set train.eval_every="$((s / 2))" --set train.log_every="$s" \
    $(extra_for "$name") >"$work/$name.log" 2>&1 || { tail -20 "$work/$name.log" >&2; exit 1; }
  echo "## $name ($(cut -d' ' -f1-3 /proc/loadavg))" | log
  sed -n '/memory plan:/,/planned peak/p' "$work/$name.log" | sed -E "s/^\[[0-9:]+\] \[w[0-9]+\] //" | log
  /usr/bin/python3 - "$work/$name/worker-000/metrics.jsonl" "$name" <<'PY' | log
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
mem = [e for e in events if e["event"] == "memory"]
plan = next(e for e in mem if e["phase"] == "plan")
peak = next(e for e in mem if e["phase"] == "measured")
p, m = plan["host_bytes"], peak["host_peak_bytes"]
print(f"RESULT {sys.argv[2]:32s} plan {p / 2**20:9.1f} MiB  peak {m / 2**20:9.1f} MiB  plan/peak {p / m:.3f}  "
      f"{'within 10%' if abs(p / m - 1) <= 0.10 else 'OUTSIDE 10%'}")
PY
done
