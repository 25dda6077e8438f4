#!/usr/bin/env bash
# GPT-2 124M on a CUDA GPU (a stage of bench/run_gpu_session.sh, or alone with the bundle
# unpacked and BUNDLE/env.sh sourced): tokens/s and MFU of the training step (B x 1024 tokens,
# V 50304 tied, GELU tanh), ROUNDS rounds alternating:
#   codistill-bf16   bench_gpt_step --device cuda --precision bf16, flash attention, fused head
#   codistill-f32    the same in float32 (no TF32)
#   pytorch-sdpa     torch_gpt_step.py --device cuda --dtype bf16 (autocast) --attention sdpa
#   pytorch-compile  the same under torch.compile (left out with COMPILE=0)
# then codistillation's cost: codistill-bf16 with K = 1, 2 forward-only teachers (bf16 products;
# TEACHER_WEIGHTS float32|bf16, default float32). MFU = the model FLOPs per step (bench_gpt_step's
# count: 6 x matrix parameters x tokens + attention) / step time / PEAK_TFLOPS (default from the
# GPU's name: 989 for H100 and H200, dense bf16). Writes OUT/gpt2_cuda.jsonl and prints the table.
#   OUT=DIR bench/run_gpu_gpt2.sh
# Environment: BUNDLE (./bundle), PYTHON (python3 with torch 2.x), B (8), ROUNDS (3), STEPS (10),
# WARMUP (3), COMPILE (1), TEACHER_WEIGHTS, PEAK_TFLOPS.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:?run_gpu_gpt2.sh: set OUT}"
mkdir -p "$out"
bundle="$(cd "${BUNDLE:-$root/bundle}" && pwd)"
# shellcheck source=/dev/null
[ -f "$bundle/env.sh" ] && source "$bundle/env.sh"
python="${PYTHON:-python3}"
rounds="${ROUNDS:-3}" steps="${STEPS:-10}" warmup="${WARMUP:-3}"
gpu="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
peak="${PEAK_TFLOPS:-}"
[ -z "$peak" ] && case "$gpu" in *H100* | *H200*) peak=989 ;; *) peak=0 ;; esac
echo "gpu: $gpu; peak bf16 dense $peak TFLOP/s; bundle: $(head -n 3 "$bundle/build-info.txt" 2>/dev/null | tr '\n' ' ')"
shape=(--B "${B:-8}" --T 1024 --D 768 --heads 12 --layers 12 --V 50304 --tied --gelu tanh --steps "$steps" --warmup "$warmup")
jsonl="$out/gpt2_cuda.jsonl"
: >"$jsonl"
failed=0
run() {  # run NAME CMD...: one JSON line tagged with the contender's name and round
  local name="$1"
  shift
  "$@" | sed "s/^{/{\"name\": \"$name\", \"round\": $r, /" | tee -a "$jsonl"
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "run_gpu_gpt2.sh: $name failed" >&2; failed=1; }
}
codistill=("$bundle/bin/bench_gpt_step" "${shape[@]}" --device cuda --attention flash --fused-head)
contenders=(codistill-bf16 pytorch-sdpa codistill-f32)
[ "${COMPILE:-1}" = 1 ] && contenders+=(pytorch-compile)
for ((r = 1; r <= rounds; r++)); do
  n=${#contenders[@]}
  for ((i = 0; i < n; i++)); do
    c="${contenders[$(((i + r - 1) % n))]}"
    case "$c" in
      codistill-bf16) run "$c" "${codistill[@]}" --precision bf16 ;;
      codistill-f32) run "$c" "${codistill[@]}" --precision float32 ;;
      pytorch-sdpa) run "$c" "$python" bench/torch_gpt_step.py "${shape[@]}" --device cuda --dtype bf16 --attention sdpa ;;
      pytorch-compile) run "$c" "$python" bench/torch_gpt_step.py "${shape[@]}" --device cuda --dtype bf16 --attention sdpa --compile ;;
    esac
  done
  for k in 1 2; do
    run "codistill-bf16-K$k" "${codistill[@]}" --precision bf16 --teachers "$k" --teacher-precision bf16 \
      --teacher-weights "${TEACHER_WEIGHTS:-float32}"
  done
done
"$python" - "$jsonl" "$peak" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
peak = float(sys.argv[2])
names = sorted({r["name"] for r in rows}, key=lambda n: (n.startswith("codistill-bf16-K"), n))
med = {}
print(f"{'contender':>18} {'best ms':>9} {'median ms':>10} {'tokens/s':>10} {'TFLOP/s':>8} {'MFU':>6}")
for n in names:
    ms = [r["step_ms_median"] for r in rows if r["name"] == n]
    tok = rows[0]["B"] * rows[0]["T"]
    flop = next(r["gflop_per_step"] for r in rows if r["name"] == n) * 1e9
    med[n] = st.median(ms)
    tf = flop / (med[n] / 1e3) / 1e12
    mfu = f"{100 * tf / peak:5.1f}%" if peak > 0 else "   n/a"
    print(f"{n:>18} {min(ms):9.1f} {med[n]:10.1f} {tok / (med[n] / 1e3):10.0f} {tf:8.1f} {mfu}")
for p in ("pytorch-sdpa", "pytorch-compile"):
    if p in med and "codistill-bf16" in med:
        print(f"{p}/codistill-bf16 step time (medians): {med[p] / med['codistill-bf16']:.2f}x")
for k in (1, 2):
    n = f"codistill-bf16-K{k}"
    if n in med and "codistill-bf16" in med:
        print(f"K = {k}: step {med[n] / med['codistill-bf16']:.2f}x K = 0 (budget 1 + 0.4 K = {1 + 0.4 * k:.1f}x)")
PY
exit "$failed"
