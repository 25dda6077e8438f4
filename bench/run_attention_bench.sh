#!/usr/bin/env bash
# Causal attention alone on the CPU, forward + backward, float32, side by side: codistill's
# flash attention and its materialized op (bench/bench_attention --only), PyTorch's written-out
# softmax and JAX's jax.nn.dot_product_attention (bench/py_attention.py), at each length T;
# and the bf16 rows: codistill's flash attention with bf16 operands (flash-bf16: float32
# tensors, Compute::bf16, as train.precision: bf16 runs it) beside PyTorch and JAX on bf16
# inputs (torch-bf16, jax-bf16).
# Every contender runs in a process of its own per length (so its peak resident memory is its
# own: VmHWM less the resident set once loaded, before the inputs), one warm-up call then
# REPEATS timed calls; ROUNDS rounds, the order rotating from round to round, the load average
# recorded before each run. Summary per T: best and median over rounds of each run's median,
# the peak memory above the baseline, and the ratios to codistill's flash attention.
# Writes RESULTS_DIR/RESULTS_NAME.json and .txt (RESULTS_NAME: attention_cpu).
#   bench/run_attention_bench.sh
# Environment: TS ("256 512 1024 2048 4096"), B (1), H (12), HD (64), THREADS (2), ROUNDS (3),
#   REPEATS (3), BUILD_DIR (build/), SKIP_BUILD=1, RESULTS_DIR (bench/results),
#   TORCH_PYTHON (/usr/bin/python3), JAX_PYTHON (.venv-bench/bin/python),
#   CONTENDERS ("flash materialized torch jax flash-bf16 torch-bf16 jax-bf16"),
#   TORCH_BF16_REPEATS (REPEATS: Debian's torch 1.13 runs bf16 on this CPU an order of
#   magnitude slower than float32, so a long T may be timed with fewer calls)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="$(realpath -m "${BUILD_DIR:-$root/build}")"
results="${RESULTS_DIR:-$root/bench/results}"
rounds="${ROUNDS:-3}" threads="${THREADS:-2}"
torch_py="${TORCH_PYTHON:-/usr/bin/python3}" jax_py="${JAX_PYTHON:-$root/.venv-bench/bin/python}"
[ -x "$jax_py" ] || { echo "run_attention_bench.sh: no $jax_py (scripts/setup.sh --bench)" >&2; exit 1; }
[ "${SKIP_BUILD:-0}" = 1 ] || cmake --build "$build" --target bench_attention -j "$threads" >/dev/null
bin="$build/bench/bench_attention"
[ -x "$bin" ] || { echo "run_attention_bench.sh: no $bin" >&2; exit 1; }
args=(--B "${B:-1}" --H "${H:-12}" --threads "$threads" --repeats "${REPEATS:-3}")
. "$root/bench/raw_log.sh"
name="${RESULTS_NAME:-attention_cpu}"
open_raw_log "$name" "$results"
dirty="$(git -C "$root" diff --quiet HEAD || echo ' (uncommitted changes)')"
echo "commit $(git -C "$root" rev-parse --short HEAD)$dirty;" \
  "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores" | log
runs="$(mktemp)"
trap 'rm -f "$runs"' EXIT
echo "uptime at start: $(uptime)" | log
echo "args: ${args[*]} --hd ${HD:-64}; lengths ${TS:-256 512 1024 2048 4096}; rounds $rounds" | log

read -r -a contenders <<<"${CONTENDERS:-flash materialized torch jax flash-bf16 torch-bf16 jax-bf16}"
n=${#contenders[@]}
bf16=(--dtype bfloat16)
torch_bf16_args=("${args[@]}")
torch_bf16_args[$((${#args[@]} - 1))]="${TORCH_BF16_REPEATS:-${REPEATS:-3}}"  # --repeats is args' last pair
for T in ${TS:-256 512 1024 2048 4096}; do
  for ((round = 1; round <= rounds; round++)); do
    for ((i = 0; i < n; i++)); do
      c="${contenders[$(((i + round - 1) % n))]}"
      load="$(cut -d' ' -f1-3 /proc/loadavg)"
      py=(bench/py_attention.py --T "$T" --hd "${HD:-64}")
      case "$c" in
        flash | materialized | flash-bf16) line="$("$bin" --only "$c" --T "$T" --hd "${HD:-64}" "${args[@]}")" ;;
        torch) line="$("$torch_py" "${py[@]}" --framework torch "${args[@]}")" ;;
        jax) line="$("$jax_py" "${py[@]}" --framework jax "${args[@]}" 2>/dev/null)" ;;
        torch-bf16) line="$("$torch_py" "${py[@]}" --framework torch "${bf16[@]}" "${torch_bf16_args[@]}")" ;;
        jax-bf16) line="$("$jax_py" "${py[@]}" --framework jax "${bf16[@]}" "${args[@]}" 2>/dev/null)" ;;
        *) echo "run_attention_bench.sh: unknown contender $c" >&2; exit 1 ;;
      esac || line="{\"contender\": \"$c\", \"T\": $T, \"failed\": true}"
      echo "T $T round $round $c (load $load): $line" | log
      echo "{\"round\": $round, \"load\": \"$load\", \"run\": $line}" >>"$runs"
    done
  done
done
echo "uptime at end: $(uptime)" | log

"$torch_py" - "$runs" "$results/$name.json" "$(git -C "$root" rev-parse --short HEAD)" <<'PY' | log
import json, statistics, sys, time
runs_path, out_path, commit = sys.argv[1:]
runs = [json.loads(l) for l in open(runs_path)]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
name = {"codistill-flash": "flash", "codistill-materialized": "materialized", "codistill-flash-bf16": "flash-bf16"}
order = ("flash", "materialized", "torch", "jax", "flash-bf16", "torch-bf16", "jax-bf16")
asked = {name.get(r["run"]["contender"], r["run"]["contender"]) for r in runs}
by = {}
for r in runs:
    x = r["run"]
    if not x.get("failed"):
        by.setdefault((x["T"], name.get(x["contender"], x["contender"])), []).append(x)
summary = {}
print(f"\n{'T':>5} {'contender':>12} {'best ms':>9} {'median ms':>10} {'fwd med ms':>10} {'peak-base MiB':>13} {'runs':>4}")
for T in sorted({k[0] for k in by}):
    for c in (c for c in order if c in asked):
        rs = by.get((T, c))
        if not rs:
            print(f"{T:>5} {c:>12} FAILED")
            continue
        med = [x["median_ms"] for x in rs]
        mem = max(x["peak_rss_mib"] - x["base_rss_mib"] for x in rs)
        s = summary.setdefault(str(T), {})[c] = {"best_ms": min(x["best_ms"] for x in rs),
                                                 "median_ms": statistics.median(med), "fwd_median_ms":
                                                 statistics.median(x["fwd_median_ms"] for x in rs),
                                                 "peak_above_base_mib": mem, "runs": len(rs)}
        print(f"{T:>5} {c:>12} {s['best_ms']:>9.1f} {s['median_ms']:>10.1f} {s['fwd_median_ms']:>10.1f} {mem:>13.0f} {len(rs):>4}")
    for base, others in (("flash", ("materialized", "torch", "jax", "flash-bf16")),
                         ("flash-bf16", ("torch-bf16", "jax-bf16"))):
        f = summary.get(str(T), {}).get(base)
        if f:
            ratios = ", ".join(f"{c}/{base} {summary[str(T)][c]['median_ms'] / f['median_ms']:.2f}x time, "
                               f"{summary[str(T)][c]['peak_above_base_mib'] / max(f['peak_above_base_mib'], 1e-9):.1f}x memory"
                               for c in others if c in summary[str(T)])
            print(f"{T:>5} (median) {ratios}")
json.dump({"benchmark": "causal attention forward + backward alone, CPU, float32 and bf16", "cpu": cpu,
           "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "commit": commit, "summary": summary, "runs": runs},
          open(out_path, "w"), indent=1)
print(f"wrote {out_path}")
PY
