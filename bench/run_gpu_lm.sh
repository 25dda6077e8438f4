#!/usr/bin/env bash
# The language-model work on a CUDA GPU, in one run (a stage of bench/run_gpu_session.sh,
# or alone on a machine with the bundle unpacked and BUNDLE/env.sh sourced):
#  1. the LM training step, side by side: bench_gpt_step --device cuda and the PyTorch
#     reference (bench/torch_gpt_step.py --device cuda), float32 without TF32 on both sides,
#     alternating ROUNDS (3) times per shape, and codistill in bf16 mixed precision beside
#     them (--precision bf16); shapes: configs/text_gpt.yaml's model (B=16
#     T=128 D=128 4x4 V=8192) and a bigger one (B=8 T=512 D=512 8 heads 8 layers V=32768);
#  2. configs/text_gpt.yaml trained on the GPU as shipped (3000 steps, one worker), then the
#     same with train.fused_head=true: wall time, held-out loss (the eval events).
# Writes OUT/gpt_step_cuda.jsonl (one JSON line per contender and round) and
# OUT/text_gpt_cuda.txt. Needs TEXT_DATA (default data/python-docs: codistill-prepare-text's
# output, carried in since it is not in git).
#   OUT=DIR bench/run_gpu_lm.sh
# Environment: BUNDLE (default ./bundle), PYTHON (python3 with torch), ROUNDS, STEPS (30),
# PARTS ("step train": which of the two parts run).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:?run_gpu_lm.sh: set OUT}"
mkdir -p "$out"
bundle="$(cd "${BUNDLE:-$root/bundle}" && pwd)"
# shellcheck source=/dev/null
source "$bundle/env.sh"
python="${PYTHON:-python3}"
rounds="${ROUNDS:-3}" steps="${STEPS:-30}"
parts=" ${PARTS:-step train} "
data="${TEXT_DATA:-$root/data/python-docs}"
failed=0  # any failing run makes the exit status 1 (the session's stage then says so)
echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
echo "bundle: $(head -n 3 "$bundle/build-info.txt" | tr '\n' ' ')"

if [[ "$parts" == *" step "* ]]; then
  shapes=("--B 16 --T 128 --D 128 --heads 4 --layers 4 --V 8192"
          "--B 8 --T 512 --D 512 --heads 8 --layers 8 --V 32768")
  for shape in "${shapes[@]}"; do
    for r in $(seq 1 "$rounds"); do
      # shellcheck disable=SC2086
      "$bundle/bin/bench_gpt_step" $shape --device cuda --steps "$steps" --warmup 5 |
        sed "s/^{/{\"round\": $r, /" | tee -a "$out/gpt_step_cuda.jsonl"
      [ "${PIPESTATUS[0]}" = 0 ] || failed=1
      # bf16 mixed precision (train.precision: bf16; bf16 cublasGemmEx operands, float32
      # accumulation) beside it.
      # shellcheck disable=SC2086
      "$bundle/bin/bench_gpt_step" $shape --device cuda --precision bf16 --steps "$steps" --warmup 5 |
        sed "s/^{/{\"round\": $r, /" | tee -a "$out/gpt_step_cuda.jsonl"
      [ "${PIPESTATUS[0]}" = 0 ] || failed=1
      # shellcheck disable=SC2086
      "$python" bench/torch_gpt_step.py $shape --device cuda --steps "$steps" --warmup 5 |
        sed "s/^{/{\"round\": $r, /" | tee -a "$out/gpt_step_cuda.jsonl"
      [ "${PIPESTATUS[0]}" = 0 ] || failed=1
    done
  done
  "$python" - "$out/gpt_step_cuda.jsonl" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for shape in sorted({(r["B"], r["T"], r["D"], r["layers"], r["V"]) for r in rows}):
    name = lambda r: r["contender"] + ("-bf16" if r.get("precision") == "bf16" else "")
    t = {c: [r["step_ms_median"] for r in rows if (r["B"], r["T"], r["D"], r["layers"], r["V"]) == shape
             and name(r) == c] for c in ("codistill", "pytorch", "codistill-bf16")}
    bf16 = t.pop("codistill-bf16")
    if all(t.values()):
        print(f"B={shape[0]} T={shape[1]} D={shape[2]} L={shape[3]} V={shape[4]}: codistill best {min(t['codistill']):.2f} "
              f"ms median {st.median(t['codistill']):.2f}; pytorch best {min(t['pytorch']):.2f} median "
              f"{st.median(t['pytorch']):.2f}; pytorch/codistill {min(t['pytorch']) / min(t['codistill']):.2f}x best-vs-best")
    if bf16 and t["codistill"]:
        print(f"  codistill bf16 best {min(bf16):.2f} ms median {st.median(bf16):.2f}; "
              f"float32/bf16 {min(t['codistill']) / min(bf16):.2f}x best-vs-best")
PY
fi

if [[ "$parts" == *" train "* ]]; then
  [ -f "$data/prepare.json" ] || { echo "run_gpu_lm.sh: no prepared text in $data" >&2; exit 2; }
  for fused in false true; do
    run="$(mktemp -d)/text_gpt"
    t0=$(date +%s%N)
    "$bundle/bin/codistill-train" --config configs/text_gpt.yaml --device cuda --run-dir "$run" \
      --set data.path="$data" --set train.fused_head="$fused" >"$run.log" 2>&1
    rc=$?
    t1=$(date +%s%N)
    [ "$rc" = 0 ] || failed=1
    {
      echo "text_gpt.yaml on cuda, train.fused_head=$fused: exit $rc, wall $(((t1 - t0) / 1000000)) ms"
      tail -n 3 "$run.log"
      grep '"event":"eval"' "$run/worker-000/metrics.jsonl" | tail -n 2
      grep '"event":"train"' "$run/worker-000/metrics.jsonl" | tail -n 1
    } | tee -a "$out/text_gpt_cuda.txt"
  done
fi
exit "$failed"
