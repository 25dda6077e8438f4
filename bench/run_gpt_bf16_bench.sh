#!/usr/bin/env bash
# bf16 mixed precision vs float32 on the CPU, side by side in one run: codistill's `gpt`
# training step (bench/bench_gpt_step: forward, loss, backward, AdamW) and a teacher's cost
# (--teacher-forward: one forward in evaluation mode), each in float32 and in bf16
# (train.precision / codistill.teacher_precision: bf16 GEMM operands, float32 accumulation,
# oneDNN), THREADS threads. ROUNDS rounds; in each, the four runs go in their own processes
# (STEPS timed steps after WARMUP), the float32/bf16 order alternating from round to round.
# Reports per run kind the best and the median over rounds of each run's median time and the
# float32/bf16 ratios (> 1: bf16 is faster), and each step run's final loss (same start, same
# batch: bf16 must stay near float32). The load average is recorded before every run.
# Writes RESULTS_DIR/gpt_step_bf16_cpu.json and .txt.
#   bench/run_gpt_bf16_bench.sh
# Environment: B (8), T (128), D (128), HEADS (4), LAYERS (4), V (8192), THREADS (2), ROUNDS (3),
#   STEPS (10), WARMUP (2), BUILD_DIR (build/), SKIP_BUILD=1, RESULTS_DIR (bench/results)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. "$root/bench/gpt_step_common.sh"

gpt_step_start gpt_step_bf16_cpu
for ((round = 1; round <= rounds; round++)); do
  if ((round % 2)); then order=(float32 bf16); else order=(bf16 float32); fi
  for what in step teacher_forward; do
    extra=()
    [ "$what" = teacher_forward ] && extra=(--teacher-forward)
    for p in "${order[@]}"; do
      load="$(cut -d' ' -f1-3 /proc/loadavg)"
      line="$("$bin" "${args[@]}" --precision "$p" "${extra[@]}")" ||
        line="{\"contender\": \"codistill\", \"precision\": \"$p\", \"what\": \"$what\", \"failed\": true}"
      echo "round $round $what $p (load $load): $line" | log
      echo "{\"round\": $round, \"load\": \"$load\", \"run\": $line}" >>"$runs"
    done
  done
done
echo "uptime at end: $(uptime)" | log

python3 - "$runs" "$results/gpt_step_bf16_cpu.json" "$(git -C "$root" rev-parse --short HEAD)" <<'PY' | log
import json, statistics, sys, time
runs_path, out_path, commit = sys.argv[1:]
runs = [json.loads(l) for l in open(runs_path)]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
flags = next((l for l in open("/proc/cpuinfo") if l.startswith("flags")), "")
by = {}
for r in runs:
    if not r["run"].get("failed"):
        by.setdefault((r["run"]["what"], r["run"]["precision"]), []).append(r["run"])
summary = {}
print(f"\n{'run':>16} {'precision':>9} {'best ms':>9} {'median ms':>10} {'tokens/s':>9} {'GFLOP/s':>8} {'runs':>5}")
for what in ("step", "teacher_forward"):
    for p in ("float32", "bf16"):
        rs = by.get((what, p))
        if not rs:
            print(f"{what:>16} {p:>9} FAILED")
            continue
        t = [x["step_ms_median"] for x in rs]
        best, med = min(t), statistics.median(t)
        tok = rs[0]["B"] * rs[0]["T"]
        gf = rs[0]["gflop_per_step"]
        s = {"best_ms": best, "median_ms": med, "tokens_per_s_best": tok / (best / 1e3),
             "gflops_best": gf / (best / 1e3), "runs": len(t)}
        if what == "step":
            s["final_loss"] = [x["final_loss"] for x in rs]
        summary[f"{what}_{p}"] = s
        print(f"{what:>16} {p:>9} {best:>9.1f} {med:>10.1f} {tok / (best / 1e3):>9.0f} {gf / (best / 1e3):>8.1f} {len(t):>5}")
for what in ("step", "teacher_forward"):
    f, b = summary.get(f"{what}_float32"), summary.get(f"{what}_bf16")
    if f and b:
        r = {"ratio_best": f["best_ms"] / b["best_ms"], "ratio_median": f["median_ms"] / b["median_ms"]}
        summary[f"{what}_float32_over_bf16"] = r
        print(f"{what}: float32/bf16 time: best {r['ratio_best']:.2f}x, median {r['ratio_median']:.2f}x")
if "step_float32" in summary and "step_bf16" in summary:
    print(f"final loss after the timed steps (same start, same batch): float32 {summary['step_float32']['final_loss']}, "
          f"bf16 {summary['step_bf16']['final_loss']}")
first = runs[0]["run"]
json.dump({"benchmark": "gpt training step and teacher forward, CPU, float32 vs bf16 mixed precision",
           "cpu": cpu, "avx512_bf16": " avx512_bf16" in flags, "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
           "commit": commit,
           "model": {k: first.get(k) for k in ("B", "T", "D", "heads", "layers", "V", "tied", "threads", "params")},
           "summary": summary, "runs": runs}, open(out_path, "w"), indent=1)
print(f"wrote {out_path}")
PY
