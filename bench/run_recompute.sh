#!/usr/bin/env bash
# Activation recomputation (train.recompute: none | blocks): the measured peak (VmHWM), the
# memory plan against it, and the step time, each config run with and without recompute on
# the CPU, with a checkpoint and an evaluation inside the steps (as bench/run_memory_plan.sh).
#   bench/run_recompute.sh [CONFIG...]   (default: configs/text_gpt.yaml configs/gpt2_124m.yaml)
# Environment: BUILD_DIR (build), STEPS (20; gpt2_124m: 4), DATA_ROOT (the folder holding
#   python-docs/, default data/), RESULTS_DIR (bench/results), NAME (recompute_<date>),
#   BATCH_124M (gpt2_124m's data.batch_size, 1).
# gpt2_124m's own shards are not here: it runs on python-docs' tokens (vocabulary 8192), as
# bench/run_memory_plan.sh runs it. Step time: the median over the steps after the first of
# batch / examples_per_s (train.log_every 1: each train event times one step, evaluation
# excluded).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source "$root/bench/raw_log.sh"
build="$(realpath -m "${BUILD_DIR:-$root/build}")"
data_root="$(realpath -m "${DATA_ROOT:-$root/data}")"
configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(configs/text_gpt.yaml configs/gpt2_124m.yaml)
open_raw_log "${NAME:-recompute_$(date -u +%F)}" "${RESULTS_DIR:-$root/bench/results}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
{
  echo "# train.recompute none vs blocks: plan, measured peak (VmHWM), step time; checkpoint and evaluation inside"
  echo "# date $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!bench/results' || echo -dirty), cpu $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), MemTotal $(sed -n 's/^MemTotal: *//p' /proc/meminfo)"
  echo "# the machine is shared with other jobs: step times are noisy (load printed per run)"
} | log
for cfg in "${configs[@]}"; do
  name="$(basename "$cfg" .yaml)"
  s="${STEPS:-20}"
  batch=16
  extra=()
  case "$name" in
    text_gpt) extra=(--set "data.path=$data_root/python-docs") ;;
    gpt2_124m)
      s="${STEPS:-4}"
      batch="${BATCH_124M:-1}"
      extra=(--set data.kind=text --set "data.path=$data_root/python-docs" --set model.vocab_size=8192
             --set "data.batch_size=$batch" --set train.eval_batch_size=1024 --set data.test_limit=2) ;;
  esac
  for mode in none blocks; do
    run="$work/${name}_$mode"
    "$build/trainer/codistill-train" --config "$cfg" --run-dir "$run" --set train.steps="$s" \
      --set checkpoint.every="$((s / 2))" --set train.eval_every="$((s / 2))" --set train.log_every=1 \
      --set train.recompute="$mode" "${extra[@]}" >"$run.log" 2>&1 || { tail -20 "$run.log" >&2; exit 1; }
    echo "## $name, train.recompute $mode, batch $batch, $s steps (load $(cut -d' ' -f1-3 /proc/loadavg))" | log
    sed -n '/memory plan/,/planned peak/p' "$run.log" | sed -E "s/^\[[0-9:]+\] \[w[0-9]+\] //" | log
    /usr/bin/python3 - "$run/worker-000/metrics.jsonl" "$name" "$mode" "$batch" <<'PY' | log
import json, statistics, sys
events = [json.loads(l) for l in open(sys.argv[1])]
mem = [e for e in events if e["event"] == "memory"]
plan = next(e for e in mem if e["phase"] == "plan")
peak = next(e for e in mem if e["phase"] == "measured")
p, m = plan["host_bytes"], peak["host_peak_bytes"]
steps = [float(sys.argv[4]) / e["examples_per_s"] for e in events if e["event"] == "train" and e["step"] > 1]
print(f"RESULT {sys.argv[2]:10s} recompute {sys.argv[3]:6s} plan {p / 2**20:8.1f} MiB  peak {m / 2**20:8.1f} MiB  "
      f"plan/peak {p / m:.3f}  activations {plan['activations'] / 2**20:7.1f} MiB  "
      f"step median {statistics.median(steps):.3f} s (min {min(steps):.3f}, {len(steps)} steps)  "
      f"recompute field {plan.get('recompute')}")
PY
  done
done
