#!/usr/bin/env bash
# Everything a lent GPU machine is asked, in one call (the lease is short: 15 minutes of
# device time, a machine start included), from the repository root there, with the bundle
# made here by `scripts/bundle.sh --tar` carried beside the working tree:
#   1. the machine: nvidia-smi, the Python/torch/cuDNN there, what env.sh finds for the
#      libraries the bundle leaves to the host;
#   2. the [cuda] tests (bundle/run_ctest.sh on the test executables that hold them: the
#      backend op driver, layers, training steps, trainer processes), in parallel;
#   3. compute-sanitizer memcheck on the layer and op tests (out-of-bounds and misaligned
#      accesses, leaks of device memory), where the machine's runtime supports it;
#   4. bench/run_train_bench_cuda.sh (throughput vs PyTorch, codistillation cost);
#   5. bench/run_loss_bench_cuda.sh (fused loss vs PyTorch eager / compile / Liger);
#   5b. (STAGES has attention, a default) bench_attention_cuda: flash vs materialized causal
#      attention, forward + backward, time and memory at T = ATTN_T (1024,2048,4096), each
#      kernel in its own process (its own device peak); attention_cuda.txt;
#   6. (STAGES has profile) bench/run_gpu_profile.sh on PROFILE_CONFIGS: kernel times under ncu;
#   7. (STAGES has lm) bench/run_gpu_lm.sh: the LM step vs PyTorch, text_gpt.yaml trained;
#   8. (STAGES has group) bench/run_gpu_group.sh: the mpi and nccl worker-group kinds, one
#      rank each under the bundled OpenMPI's mpirun, trained alike;
#   8b. (STAGES has gpt2, a default) bench/run_gpu_gpt2.sh: GPT-2 124M's step, tokens/s and
#      MFU, codistill bf16 / float32 against PyTorch 2.x (SDPA, torch.compile), K = 1, 2 teachers;
#   9. (STAGES has lmexp) the LM codistillation experiment of docs/results.md on the GPU:
#      scripts/experiments/independent_vs_codistill.sh configs/text_gpt.yaml, seeds EXP_SEEDS
#      ("1 2 3") at once, settings EXP_SETTINGS; its metrics come back as lmexp.tar.gz.
# Each stage has its own time limit, cut so that the whole run ends within BUDGET seconds
# (default 500), and a failing stage does not stop the next. What comes back ($OUT, at most
# 9 files): session.log (all of it), tests.tar.gz (every test executable's log),
# sanitizer.log, train_cuda.{json,txt}, loss_cuda.{json,txt}, attention_cuda.txt.
#   OUT=DIR bench/run_gpu_session.sh
# Environment: BUDGET (500), STAGES (default "tests sanitizer train loss attention gpt2"; add "profile"),
# TEST_PATTERN (the executables' names, grep -E), JOBS (8), SANITIZE (the test executables
# for memcheck, default "test_layers_cuda test_backend_ops"), LEAKS (1: memcheck's leak check),
# PROFILE_CONFIGS (default configs/fmnist_resnet8.yaml),
# TRAIN_CONFIGS, STEPS / OVERHEAD_STEPS (train bench), VS / KS / REPEATS (loss bench).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:?run_gpu_session.sh: set OUT to the folder that comes back}"
mkdir -p "$out"
exec > >(tee -a "$out/session.log") 2>&1
budget="${BUDGET:-500}"
start=$(date +%s)
export PYTHONUNBUFFERED=1 PYTHON="${PYTHON:-python3}"
left() { echo $((budget - ($(date +%s) - start))); }
# stage NAME CAP CMD...: runs CMD under min(CAP, time left - 5) seconds; prints its status.
stage() {
  local name="$1" cap="$2" t0 rc limit
  shift 2
  limit=$(left); limit=$((limit - 5)); [ "$limit" -gt "$cap" ] && limit="$cap"
  if [ "$limit" -lt 10 ]; then echo "## $name: SKIPPED (no time left)"; return; fi
  echo "## $name (limit ${limit}s, $(left)s of the budget left)"
  t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@"
  rc=$?
  echo "## $name: exit $rc after $(($(date +%s) - t0))s$([ $rc -eq 124 ] && echo ' (TIMED OUT)')"
  echo "$name exit=$rc seconds=$(($(date +%s) - t0))" >>"$stages"
}

echo "## machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1
nvidia-smi -L 2>&1 | head -2
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
"$PYTHON" - <<'PY' 2>&1
import sys, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "cudnn", torch.backends.cudnn.version(),
      "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
PY
command -v nvcc >/dev/null && nvcc --version | tail -n 2
sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
echo "compute-sanitizer: ${sanitizer:-none}"
stages="$(mktemp)"

echo "## unpack"
if [ ! -x bundle/bin/codistill-train ]; then
  if command -v xz >/dev/null; then tar xJf bundle.tar.xz; else "$PYTHON" -m tarfile -e bundle.tar.xz .; fi
fi
[ -f bundle-data.tar ] && [ ! -d bundle/data ] && tar xf bundle-data.tar
if [ -f bundle-data.tar.xz ] && [ ! -d bundle/data ]; then  # scripts/bundle.sh --tar: idx files uncompressed
  if command -v xz >/dev/null; then tar xJf bundle-data.tar.xz; else "$PYTHON" -m tarfile -e bundle-data.tar.xz .; fi
  gzip -1 bundle/data/fashion-mnist/*-ubyte
fi
cat bundle/build-info.txt
# shellcheck source=/dev/null
source bundle/env.sh
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
for f in bundle/bin/codistill-train bundle/bin/test_backend_ops; do
  ldd "$f" | grep -E "not found|cudnn|cublas|cudart" | sed "s|^|$(basename "$f"): |"
done

stages_wanted=" ${STAGES:-tests sanitizer train loss attention gpt2} "
want() { [[ "$stages_wanted" == *" $1 "* ]]; }
pattern="${TEST_PATTERN:-backend_ops|_cuda|^test_step$|^test_mixed_precision$|^test_bf16_simt$|nccl|^test_process_group|^test_distill_head$}"
logs="$(mktemp -d)"
want tests && stage tests 240 env TMPDIR="$logs" bundle/run_ctest.sh -j "${JOBS:-8}" --timeout 220 "$pattern"
want tests && tar -C "$logs" -czf "$out/tests.tar.gz" . 2>/dev/null

if [ -n "$sanitizer" ] && want sanitizer; then
  sanitize() {
    local t rc log
    local leaks=()
    [ "${LEAKS:-1}" = 1 ] && leaks=(--leak-check full)
    for t in ${SANITIZE:-test_layers_cuda test_backend_ops}; do
      echo "== compute-sanitizer --tool memcheck $t (35 s at most)"
      log="$(mktemp)"
      (cd "$(mktemp -d)" && timeout 35 "$sanitizer" --tool memcheck "${leaks[@]}" --error-exitcode 9 \
        "$root/bundle/bin/$t" >"$log" 2>&1)
      rc=$?
      grep -E "ERROR SUMMARY|Invalid|out of bounds|leak|Address|at 0x" "$log" | head -n 40
      tail -n 15 "$log"
      echo "== $t: exit $rc$([ $rc -eq 124 ] && echo ' (cut at 35 s)')"
    done
  }
  export -f sanitize; export root sanitizer SANITIZE LEAKS
  stage sanitizer 70 bash -c sanitize >"$out/sanitizer.log" 2>&1
  tail -n 4 "$out/sanitizer.log"
fi

if want profile; then
  for cfg in ${PROFILE_CONFIGS:-configs/fmnist_resnet8.yaml}; do
    stage "profile $(basename "$cfg" .yaml)" 120 env OUT="$out" bench/run_gpu_profile.sh "$cfg" "${PROFILE_STEPS:-10}"
  done
fi
# Benchmarks last: the machine is otherwise idle by then.
read -ra train_configs <<<"${TRAIN_CONFIGS:-configs/fmnist_mlp.yaml configs/fmnist_cnn.yaml configs/fmnist_resnet8.yaml}"
want train && stage train_bench 170 env COPY_TO="$out" STEPS="${STEPS:-1500}" OVERHEAD_STEPS="${OVERHEAD_STEPS:-1500}" \
  bench/run_train_bench_cuda.sh "${train_configs[@]}"
want loss && stage loss_bench 150 env COPY_TO="$out" VS="${VS:-1000,50304,131072}" KS="${KS:-1,4}" REPEATS="${REPEATS:-10}" \
  TIME_BUDGET=60 bench/run_loss_bench_cuda.sh
if want attention; then
  attention_bench() {
    local k
    for k in flash materialized; do
      bundle/bin/bench_attention_cuda --kernels "$k" --T "${ATTN_T:-1024,2048,4096}" --repeats "${ATTN_REPEATS:-10}"
    done
    bundle/bin/bench_attention_cuda --T "${ATTN_T:-1024,2048,4096}" --repeats "${ATTN_REPEATS:-10}" --tf32 1
  }
  export -f attention_bench
  stage attention 90 bash -c attention_bench 2>&1 | tee "$out/attention_cuda.txt"
fi
want group && stage group 150 bench/run_gpu_group.sh "${GROUP_STEPS:-300}"
want lm && stage lm 200 env OUT="$out" bench/run_gpu_lm.sh
want gpt2 && stage gpt2 "${GPT2_CAP:-240}" env OUT="$out" bench/run_gpu_gpt2.sh
if want lmexp; then
  exp="$(mktemp -d)/lmexp"
  stage lmexp "${EXP_CAP:-400}" env CODISTILL_TRAIN="$root/bundle/bin/codistill-train" JOBS="${EXP_JOBS:-3}" \
    SETTINGS="${EXP_SETTINGS:-indep:2 codistill:2 indep:4 codistill:4}" \
    scripts/experiments/independent_vs_codistill.sh configs/text_gpt.yaml "$exp" "${EXP_SEEDS:-1 2 3}" \
    --device cuda --set data.path="$root/data/python-docs" ${EXP_ARGS:-}
  (cd "$(dirname "$exp")" && find lmexp -name '*.jsonl' -o -name '*.log' -o -name 'results.json' -o -name 'stdout.txt' |
    tar -czf "$out/lmexp.tar.gz" -T -)
fi
echo "## stages"; cat "$stages"
echo "## total $(($(date +%s) - start))s"
