#!/usr/bin/env bash
# Fused linear + distillation head benchmark, side by side in one run: codistill's fused CPU
# head (bench/bench_fused_head: chunks of rows, never the N x V logits) against the unfused
# PyTorch path (bench/torch_fused_head.py: F.linear for the student and K teachers, the loss
# of DESIGN.md section 6, autograd backward to h and W; Debian's torch), float32, forward +
# backward, at V = 32768 and 131072, K = 1 and 4, N rows of hidden size H, THREADS threads.
# First both compute one small shared problem (bench_fused_head --dump) and must agree.
# Then REPEATS rounds; in each, shape by shape, both contenders run, each in a process of its
# own (so that each one's peak memory is its own), the order alternating from round to round.
# Each run: WARMUP warm-up calls, then the median of CALLS calls. Peak memory per run: VmHWM
# at the end minus VmRSS once the inputs exist (the gradients dh and dW included; "working"
# is that minus dh and dW), compared with one N x V float32 logits tensor. The table gives per
# shape and contender the best and the median over rounds, the time ratio PyTorch/codistill
# (> 1: codistill is faster) and the memory. The load average is recorded before every run.
# Writes RESULTS_DIR/fused_head.json (CPU model, date, commit, loads, every run) and
# RESULTS_DIR/fused_head.txt (raw output).
#   bench/run_fused_head_bench.sh
# Environment: N (2048), H (768), THREADS (2), REPEATS (3), CALLS (1), WARMUP (0),
#   WORKSPACE_MB (64: DistillHeadParams::workspace_bytes), BUILD_DIR (build/), SKIP_BUILD=1,
#   RESULTS_DIR (bench/results), TORCH_PYTHON (/usr/bin/python3), VS ("32768 131072": the
#   vocabularies), KS ("1 4": the teacher counts), NAME (fused_head: the results' file names).
# GPT-2's head: VS=50304 KS="1 2 3 4" NAME=fused_head_gpt2 bench/run_fused_head_bench.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="$(realpath -m "${BUILD_DIR:-$root/build}")"
n="${N:-2048}" h="${H:-768}" threads="${THREADS:-2}" repeats="${REPEATS:-3}"
calls="${CALLS:-1}" warmup="${WARMUP:-0}" ws="${WORKSPACE_MB:-64}"
py="${TORCH_PYTHON:-/usr/bin/python3}"
results="${RESULTS_DIR:-$root/bench/results}"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cmake --build "$build" --target bench_fused_head -j1 >/dev/null
fi
bin="$build/bench/bench_fused_head"
[ -x "$bin" ] || { echo "run_fused_head_bench.sh: no $bin" >&2; exit 1; }

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/check" "$results"
name="${NAME:-fused_head}"
raw="$results/$name.txt"
: >"$raw"
log() { tee -a "$raw"; }
echo "uptime at start: $(uptime)" | log
echo "N=$n H=$h threads=$threads rounds=$repeats calls=$calls warmup=$warmup workspace=${ws}MiB build=$build" | log
"$bin" --dump "$out/check" | log
"$py" bench/torch_fused_head.py --check "$out/check" | log

runs="$out/runs.jsonl"
: >"$runs"
for ((round = 1; round <= repeats; round++)); do
  if ((round % 2)); then order=(codistill pytorch); else order=(pytorch codistill); fi
  for V in ${VS:-32768 131072}; do
    for K in ${KS:-1 4}; do
      for c in "${order[@]}"; do
        load="$(cut -d' ' -f1-3 /proc/loadavg)"
        args=(--N "$n" --H "$h" --V "$V" --K "$K" --threads "$threads" --calls "$calls" --warmup "$warmup")
        if [ "$c" = codistill ]; then
          line="$("$bin" "${args[@]}" --workspace-mb "$ws")" || line='{"contender": "codistill", "failed": true}'
        else
          line="$("$py" bench/torch_fused_head.py "${args[@]}")" || line='{"contender": "pytorch", "failed": true}'
        fi
        echo "round $round V=$V K=$K $c (load $load): $line" | log
        echo "{\"round\": $round, \"V\": $V, \"K\": $K, \"load\": \"$load\", \"run\": $line}" >>"$runs"
      done
    done
  done
done
echo "uptime at end: $(uptime)" | log

"$py" - "$runs" "$results/$name.json" "$(git -C "$root" rev-parse --short HEAD)" "$n" "$h" "$threads" <<'EOF' | log
import json, statistics, sys, time
runs_path, out_path, commit, n, h, threads = sys.argv[1:]
runs = [json.loads(l) for l in open(runs_path)]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
table = {}
for r in runs:
    run = r["run"]
    if run.get("failed"):
        continue
    table.setdefault((r["V"], r["K"]), {}).setdefault(run["contender"], []).append(run)
rows = []
print(f"\n{'V':>7} {'K':>2} {'contender':>10} {'best s':>8} {'median s':>9} {'peak MiB':>9} {'working MiB':>12} {'N x V MiB':>10}")
for (V, K), by in sorted(table.items()):
    summary = {}
    for c, rs in sorted(by.items()):
        t = [x["median_s"] for x in rs]
        peak = max(x["peak_extra_bytes"] for x in rs)
        work = max(x["working_bytes"] for x in rs)
        logits = rs[0]["logits_bytes"]
        summary[c] = {"best_s": min(t), "median_s": statistics.median(t), "runs": len(t), "peak_extra_bytes": peak,
                      "working_bytes": work, "logits_bytes": logits, "peak_below_one_logits_tensor": peak < logits,
                      "working_below_one_logits_tensor": work < logits}
        print(f"{V:>7} {K:>2} {c:>10} {min(t):>8.3f} {statistics.median(t):>9.3f} {peak / 2**20:>9.0f} {work / 2**20:>12.0f} {logits / 2**20:>10.0f}")
    if "codistill" in summary and "pytorch" in summary:
        cs, ps = summary["codistill"], summary["pytorch"]
        summary["speedup_best"] = ps["best_s"] / cs["best_s"]
        summary["speedup_median"] = ps["median_s"] / cs["median_s"]
        summary["memory_ratio"] = ps["peak_extra_bytes"] / cs["peak_extra_bytes"]
        print(f"{'':>7} {'':>2} PyTorch/codistill time: best {summary['speedup_best']:.2f}x, median {summary['speedup_median']:.2f}x; "
              f"peak memory {summary['memory_ratio']:.1f}x; codistill below one N x V logits tensor: "
              f"peak {cs['peak_below_one_logits_tensor']}, working {cs['working_below_one_logits_tensor']}")
    rows.append({"V": V, "K": K, **summary})
json.dump({"benchmark": "fused linear + distillation head, CPU, float32, forward + backward", "cpu": cpu,
           "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "commit": commit, "N": int(n), "H": int(h),
           "threads": int(threads), "shapes": rows, "runs": runs}, open(out_path, "w"), indent=1)
print(f"wrote {out_path}")
EOF
