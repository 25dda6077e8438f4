#!/usr/bin/env bash
# Language-model training step on the CPU, side by side in one run: codistill's `gpt` model
# (bench/bench_gpt_step), the same model in PyTorch (bench/torch_gpt_step.py, Debian's torch)
# and in JAX/XLA (bench/jax_gpt_step.py, .venv-bench), float32, THREADS threads: forward of
# int32 tokens [B, T], mean next-token cross-entropy over B*T rows, backward, AdamW. Same
# architecture and parameter count on all three (checked: the runs' "params" must agree).
# ROUNDS rounds; in each, every contender runs once in its own process (STEPS timed steps
# after WARMUP), the order rotating from round to round. Reports per contender the best and
# the median over rounds of each run's median step time, tokens/s, GFLOP/s (model FLOPs),
# and the ratios PyTorch/codistill and JAX/codistill (> 1: codistill is faster). The load
# average is recorded before every run. Writes RESULTS_DIR/gpt_step_cpu.json and .txt.
#   bench/run_gpt_step_bench.sh
# Environment: B (8), T (128), D (128), HEADS (4), LAYERS (4), V (8192), THREADS (2), ROUNDS (3),
#   STEPS (10), WARMUP (2), TIED (0|1), BUILD_DIR (build/), SKIP_BUILD=1, RESULTS_DIR
#   (bench/results), TORCH_PYTHON (/usr/bin/python3), JAX_PYTHON (.venv-bench/bin/python),
#   NAME (gpt_step_cpu: the results' file names), and for GPT-2's recipe: GELU (erf|tanh, all
#   three), DTYPE (float32|bf16: codistill's --precision, PyTorch's CPU autocast, JAX's bf16
#   dense operands), ATTENTION (materialized|flash: codistill's model.attention; with flash,
#   JAX runs jax.nn.dot_product_attention; PyTorch 1.13 has only the written-out softmax),
#   FUSED_HEAD (0|1: codistill's train.fused_head), RECOMPUTE (none|blocks: codistill's
#   train.recompute; the others keep every activation). Each run also reports its peak resident
#   memory (VmHWM / ru_maxrss), summarized per contender (the largest of its runs).
# GPT-2 124M at T = 1024:
#   NAME=gpt2_124m_step B=2 T=1024 D=768 HEADS=12 LAYERS=12 V=50304 TIED=1 GELU=tanh \
#     ATTENTION=flash FUSED_HEAD=1 STEPS=3 WARMUP=1 bench/run_gpt_step_bench.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. "$root/bench/gpt_step_common.sh"
torch_py="${TORCH_PYTHON:-/usr/bin/python3}" jax_py="${JAX_PYTHON:-$root/.venv-bench/bin/python}"
[ -x "$jax_py" ] || { echo "run_gpt_step_bench.sh: no $jax_py (scripts/setup.sh --bench)" >&2; exit 1; }
[ "${TIED:-0}" = 1 ] && args+=(--tied)
gelu="${GELU:-erf}" dtype="${DTYPE:-float32}" attention="${ATTENTION:-materialized}"
args+=(--gelu "$gelu")
cargs=(--precision "$dtype" --attention "$attention") pargs=(--dtype "$dtype") jargs=(--dtype "$dtype")
[ "${FUSED_HEAD:-0}" = 1 ] && cargs+=(--fused-head)
cargs+=(--recompute "${RECOMPUTE:-none}")
[ "$attention" = flash ] && jargs+=(--attention sdpa)

gpt_step_start "${NAME:-gpt_step_cpu}"
echo "codistill: ${cargs[*]}; pytorch: ${pargs[*]}; jax: ${jargs[*]}" | log
contenders=(codistill pytorch jax)
for ((round = 1; round <= rounds; round++)); do
  for ((i = 0; i < 3; i++)); do
    c="${contenders[$(((i + round - 1) % 3))]}"
    load="$(cut -d' ' -f1-3 /proc/loadavg)"
    case "$c" in
      codistill) line="$("$bin" "${args[@]}" "${cargs[@]}")" || line='{"contender": "codistill", "failed": true}' ;;
      pytorch) line="$("$torch_py" bench/torch_gpt_step.py "${args[@]}" "${pargs[@]}")" || line='{"contender": "pytorch", "failed": true}' ;;
      jax) line="$("$jax_py" bench/jax_gpt_step.py "${args[@]}" "${jargs[@]}" 2>/dev/null)" || line='{"contender": "jax", "failed": true}' ;;
    esac
    echo "round $round $c (load $load): $line" | log
    echo "{\"round\": $round, \"load\": \"$load\", \"run\": $line}" >>"$runs"
  done
done
echo "uptime at end: $(uptime)" | log

"$torch_py" - "$runs" "$results/${NAME:-gpt_step_cpu}.json" "$(git -C "$root" rev-parse --short HEAD)" <<'PY' | log
import json, statistics, sys, time
runs_path, out_path, commit = sys.argv[1:]
runs = [json.loads(l) for l in open(runs_path)]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
by = {}
for r in runs:
    if not r["run"].get("failed"):
        by.setdefault(r["run"]["contender"], []).append(r["run"])
params = {c: rs[0]["params"] for c, rs in by.items()}
if len(set(params.values())) > 1:
    print(f"PARAMETER COUNTS DIFFER: {params}: not the same model")
summary = {}
print(f"\n{'contender':>10} {'best ms':>9} {'median ms':>10} {'tokens/s':>9} {'GFLOP/s':>8} {'peak MiB':>9} {'runs':>5}")
for c in ("codistill", "pytorch", "jax"):
    if c not in by:
        print(f"{c:>10} FAILED")
        continue
    t = [x["step_ms_median"] for x in by[c]]
    best, med = min(t), statistics.median(t)
    tok = by[c][0]["B"] * by[c][0]["T"]
    gf = by[c][0]["gflop_per_step"]
    peak = max(x.get("peak_rss_mib", 0) for x in by[c])
    summary[c] = {"best_ms": best, "median_ms": med, "tokens_per_s_best": tok / (best / 1e3),
                  "gflops_best": gf / (best / 1e3), "peak_rss_mib": peak, "runs": len(t)}
    print(f"{c:>10} {best:>9.1f} {med:>10.1f} {tok / (best / 1e3):>9.0f} {gf / (best / 1e3):>8.1f} {peak:>9.0f} {len(t):>5}")
for other in ("pytorch", "jax"):
    if other in summary and "codistill" in summary:
        s = summary[other]
        s["ratio_best"] = s["best_ms"] / summary["codistill"]["best_ms"]
        s["ratio_median"] = s["median_ms"] / summary["codistill"]["median_ms"]
        s["memory_ratio"] = s["peak_rss_mib"] / max(summary["codistill"]["peak_rss_mib"], 1e-9)
        print(f"{other}/codistill step time: best {s['ratio_best']:.2f}x, median {s['ratio_median']:.2f}x; "
              f"peak memory {s['memory_ratio']:.2f}x")
first = runs[0]["run"]
json.dump({"benchmark": "gpt training step, CPU (forward, loss, backward, AdamW)", "cpu": cpu,
           "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "commit": commit,
           "model": {k: first.get(k) for k in ("B", "T", "D", "heads", "layers", "V", "tied", "threads", "params", "gelu")},
           "summary": summary, "runs": runs}, open(out_path, "w"), indent=1)
print(f"wrote {out_path}")
PY
