#!/usr/bin/env bash
# Codistillation's cost per teacher for a GPT-2-124M-shaped model on the CPU: bench_gpt_step's
# step with the fused head and K = 0, 1, 2 teachers (forward-only models of the same shape,
# their logits only inside the fused head), float32 teachers and bf16 ones (bf16 weights held
# as bf16, bf16 products: codistill.teacher_weights and teacher_precision bf16); the student
# trains in float32. Each run is a process of its own (its peak memory its own); ROUNDS
# rounds, the order rotating from round to round, the load recorded before each run.
# Per teacher = (step with K / step without - 1) / K, from the medians over rounds of each
# run's median step; teacher memory = (peak with K - peak without) / K / parameters.
# Writes RESULTS_DIR/gpt_teacher_overhead.txt.
#   bench/run_gpt_teacher_overhead.sh
# Environment: B (1), T (1024), ROUNDS (3), STEPS (2), WARMUP (1), THREADS (2), BUILD_DIR (build/),
#   SKIP_BUILD=1, RESULTS_DIR (bench/results)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="$(realpath -m "${BUILD_DIR:-$root/build}")"
results="${RESULTS_DIR:-$root/bench/results}"
rounds="${ROUNDS:-3}" threads="${THREADS:-2}"
[ "${SKIP_BUILD:-0}" = 1 ] || cmake --build "$build" --target bench_gpt_step -j "$threads" >/dev/null
bin="$build/bench/bench_gpt_step"
args=(--B "${B:-1}" --T "${T:-1024}" --D 768 --heads 12 --layers 12 --V 50304 --tied --gelu tanh --attention flash
      --fused-head --threads "$threads" --steps "${STEPS:-2}" --warmup "${WARMUP:-1}")
. "$root/bench/raw_log.sh"
open_raw_log gpt_teacher_overhead "$results"
runs="$(mktemp)"
trap 'rm -f "$runs"' EXIT
echo "uptime at start: $(uptime); $(grep -m1 'model name' /proc/cpuinfo); commit $(git rev-parse --short HEAD)" | log
echo "args: ${args[*]}; rounds $rounds" | log
setups=("0 float32" "1 float32" "2 float32" "1 bf16" "2 bf16")
for ((round = 1; round <= rounds; round++)); do
  for ((i = 0; i < ${#setups[@]}; i++)); do
    read -r k w <<<"${setups[$(((i + round - 1) % ${#setups[@]}))]}"
    load="$(cut -d' ' -f1-3 /proc/loadavg)"
    line="$("$bin" "${args[@]}" --teachers "$k" --teacher-weights "$w" --teacher-precision "$w")" ||
      line="{\"teachers\": $k, \"teacher_weights\": \"$w\", \"failed\": true}"
    echo "round $round K=$k $w (load $load): $line" | log
    echo "$line" >>"$runs"
  done
done
echo "uptime at end: $(uptime)" | log
/usr/bin/python3 - "$runs" <<'PY' | log
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
ok = [r for r in runs if not r.get("failed")]
def med(k, w):
    rs = [r for r in ok if r["teachers"] == k and (k == 0 or r["teacher_weights"] == w)]
    return (statistics.median(r["step_ms_median"] for r in rs), min(r["step_ms_best"] for r in rs),
            max(r["peak_rss_mib"] for r in rs), rs[0]["params"]) if rs else None
base = med(0, "float32")
print(f"\nK = 0: step median {base[0]:.0f} ms (best {base[1]:.0f}), peak {base[2]:.0f} MiB")
for w in ("float32", "bf16"):
    for k in (1, 2):
        m = med(k, w)
        if not m:
            print(f"K = {k} {w}: FAILED"); continue
        per = (m[0] / base[0] - 1) / k
        mem = (m[2] - base[2]) * 2**20 / k / m[3]
        print(f"K = {k} {w} teachers: step median {m[0]:.0f} ms = {m[0] / base[0]:.2f}x K = 0 "
              f"(budget 1 + 0.3 K = {1 + 0.3 * k:.1f}x), per teacher {per:.2f}; peak {m[2]:.0f} MiB, "
              f"{mem:.2f} bytes per teacher parameter above K = 0")
PY
