#!/usr/bin/env bash
# Loss benchmark on a CUDA GPU, side by side in one run: codistill's fused distillation loss
# kernels (bench/bench_loss_cuda: float32 and bf16, gradient in place) and the same loss in
# PyTorch eager, torch.compile and Liger-Kernel (bench/torch_loss_cuda.py), on the very same
# inputs, at N=8192 rows, V in 1000 32768 50304 131072, K in 1 2 4 teachers, each side with
# its own device-to-device copy bandwidth as the ceiling. In order:
#   1. generator check: both sides generate a small input, torch compares bit for bit;
#   2. bench_loss_cuda times every shape, writes its losses and three gradient rows per shape;
#   3. torch checks those against float64 (loss over all rows, the gradient rows);
#   4. torch_loss_cuda.py times eager, compile and Liger;
#   5. bench/combine_loss_cuda.py prints the table of ratios (codistill vs eager, vs compile,
#      vs Liger, % of copy bandwidth, loss vs float64 and vs eager, gradient error) and writes
#      bench/results/loss_cuda.json; bench/results/loss_cuda.txt gets the raw output.
#   bench/run_loss_bench_cuda.sh
# Where the programs come from: BUNDLE (default <repo>/bundle when it holds
# bin/bench_loss_cuda) is a relocatable bundle made by scripts/bundle.sh, for a GPU machine
# without this project's build dependencies; otherwise BUILD_DIR (default build/) is built.
# Liger-Kernel: imported if the interpreter has it, else installed (pip --no-index, into a
# temporary folder) from BUNDLE/wheels or bench/wheels (bench/fetch_wheels.sh), else skipped.
# Environment: PYTHON (default python3, the one with torch and CUDA), REPEATS (20), WARMUP (3),
# VS, KS, DTYPES, IMPLS (comma lists: run a subset), N (rows, 8192), COPY_MIB (1024),
# TIME_BUDGET (seconds: torch.compile, one compile per shape, is skipped for the shapes
# that start later, so that the run fits a time limit),
# NAME (default loss_cuda: the result files' name), COPY_TO (also copy the result files
# into this folder, e.g. "$OUT"), DEVICE (cuda; cpu: a smoke test of the whole pipeline on
# the CPU, codistill's CPU fused loss against torch on the CPU; use with a small N and VS).
# Exit status: 0, or 1 when a numerical check failed or a side failed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
name="${NAME:-loss_cuda}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p bench/results "$work/gen" "$work/grad"

bundle="${BUNDLE:-}"
[ -z "$bundle" ] && [ -x "$root/bundle/bin/bench_loss_cuda" ] && bundle="$root/bundle"
if [ -n "$bundle" ]; then
  bundle="$(cd "$bundle" && pwd)"
  # shellcheck source=/dev/null
  source "$bundle/env.sh"   # CUDA libraries left to the host (cuBLAS...), if the programs need any
  bench="$bundle/bin/bench_loss_cuda"
else
  build="${BUILD_DIR:-$root/build}"
  [ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" --target bench_loss_cuda -j "${JOBS:-$(nproc)}" >/dev/null
  bench="$build/bench/bench_loss_cuda"
fi
[ -x "$bench" ] || { echo "run_loss_bench_cuda.sh: $bench missing (a CUDA build is needed)" >&2; exit 2; }

if ! "$python" -c "import liger_kernel.transformers" 2>/dev/null; then
  wheels=()
  for d in ${bundle:+"$bundle/wheels"} "$root/bench/wheels"; do
    compgen -G "$d/*.whl" >/dev/null && { wheels=("$d"/*.whl); break; }
  done
  if [ ${#wheels[@]} -gt 0 ]; then
    PIP_ROOT_USER_ACTION=ignore "$python" -m pip install -q --disable-pip-version-check --no-index --no-deps \
      --no-compile --no-cache-dir --target "$work/site" \
      "${wheels[@]}" && export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}" ||
      echo "run_loss_bench_cuda.sh: could not install ${wheels[*]}: Liger is skipped" >&2
  fi
fi

gpu="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)"
. "$root/bench/provenance.sh"
bench_commit "$bundle"

sub=() psub=()
[ -n "${VS:-}" ] && sub+=(--v "$VS") && psub+=(--v "$VS")
[ -n "${KS:-}" ] && sub+=(--k "$KS") && psub+=(--k "$KS")
[ -n "${DTYPES:-}" ] && sub+=(--dtypes "$DTYPES") && psub+=(--dtypes "$DTYPES")
[ -n "${IMPLS:-}" ] && psub+=(--impls "$IMPLS")
[ -n "${N:-}" ] && sub+=(--n "$N") && psub+=(--n "$N")
[ -n "${TIME_BUDGET:-}" ] && psub+=(--time-budget "$TIME_BUDGET")
[ -n "${COPY_MIB:-}" ] && sub+=(--copy-mib "$COPY_MIB") && psub+=(--copy-mib "$COPY_MIB")
timing=(--repeats "${REPEATS:-20}" --warmup "${WARMUP:-3}")
host=() pydev=(--device cuda)
if [ "${DEVICE:-cuda}" = cpu ]; then
  host=(--host) pydev=(--device cpu)
  gpu="cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), -"
fi

. "$root/bench/raw_log.sh"
open_raw_log "$name"
export PYTHONUNBUFFERED=1
status=0
{
  echo "gpu: ${gpu:-unknown}; commit: ${commit:-unknown}; bench: $bench${bundle_commit:+ (bundle built from $bundle_commit)}; $("$python" --version 2>&1)"
  echo "== generator check"
} | log
"$bench" --gen-check "$work/gen" | log
"$python" bench/torch_loss_cuda.py "${pydev[@]}" --gen-check "$work/gen" --json "$work/gen.json" 2>&1 | log || status=1
echo "== codistill" | log
"$bench" "${host[@]}" "${sub[@]}" "${timing[@]}" --json "$work/ours.json" --grad-rows "$work/grad" 2>&1 | log || status=1
echo "== codistill against float64 (loss over all rows, gradient rows)" | log
"$python" bench/torch_loss_cuda.py "${pydev[@]}" --grad-check "$work/grad" --json "$work/grad.json" 2>&1 | log || status=1
echo "== pytorch" | log
"$python" bench/torch_loss_cuda.py "${pydev[@]}" "${psub[@]}" "${timing[@]}" --json "$work/torch.json" 2>&1 | log || status=1

args=()
for f in ours torch gen grad; do [ -f "$work/$f.json" ] && args+=("--$f" "$work/$f.json"); done
"$python" bench/combine_loss_cuda.py "${args[@]}" --gpu "${gpu%%,*}" --driver "$(echo "${gpu#*,}" | xargs)" \
  --commit "${commit:-unknown}" --host "$(hostname)" --meta "bundle_commit=${bundle_commit:-}" --out "bench/results/$name.json" --txt "$raw" || status=1
if [ -n "${COPY_TO:-}" ]; then
  cp "bench/results/$name.json" "$raw" "$COPY_TO/" || status=1
fi
exit "$status"
