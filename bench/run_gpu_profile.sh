#!/usr/bin/env bash
# Where a training step's GPU time goes: runs codistill-train for a few steps under Nsight
# Compute (ncu, hardware clocks left alone), records every kernel launch with its duration,
# and prints the kernels grouped by name: launches, total and mean microseconds, share of
# the profiled GPU time. The first steps carry one-off work (cuDNN plans, allocator growth)
# and the final evaluation its own kernels: compare kernel counts with STEPS to tell them
# apart. Writes OUT/profile_<config>.csv (one row per launch) and OUT/profile_<config>.txt.
#   OUT=DIR bench/run_gpu_profile.sh CONFIG [STEPS]     (STEPS default 10)
# Uses BUNDLE (default <repo>/bundle) like the other GPU scripts, DATA as run_train_bench_cuda.sh,
# BATCH (256).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cfg="${1:?usage: OUT=DIR bench/run_gpu_profile.sh CONFIG [STEPS]}"
steps="${2:-10}"
out="${OUT:?set OUT}"
bundle="${BUNDLE:-$root/bundle}"
# shellcheck source=/dev/null
source "$bundle/env.sh"
data="${DATA:-/usr/share/datasets/fashion-mnist}"
[ -f "$data/train-images-idx3-ubyte.gz" ] || data="$bundle/data/fashion-mnist"
ncu="$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)"
[ -n "$ncu" ] || { echo "run_gpu_profile.sh: no ncu (Nsight Compute) here" >&2; exit 2; }
name="$(basename "$cfg" .yaml)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --page raw --print-units base \
  --log-file "$out/profile_$name.csv" \
  "$bundle/bin/codistill-train" --config "$cfg" --run-dir "$work/run" --device cuda \
  --set "train.steps=$steps" --set train.eval_every=0 --set checkpoint.every=0 \
  --set data.test_limit=256 --set "data.batch_size=${BATCH:-256}" --set "data.path=$data" \
  >"$work/train.log" 2>&1 || { tail -n 30 "$work/train.log"; exit 1; }
"${PYTHON:-python3}" - "$out/profile_$name.csv" "$steps" <<'PY' | tee "$out/profile_$name.txt"
import csv, collections, sys
rows = list(csv.reader(open(sys.argv[1])))
head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
cols = rows[head]
k, t = cols.index("Kernel Name"), cols.index("gpu__time_duration.sum")
agg = collections.defaultdict(lambda: [0, 0.0])
for r in rows[head + 1:]:
    if len(r) <= max(k, t):
        continue
    try:
        ns = float(r[t].replace(",", ""))
    except ValueError:
        continue  # the units row
    agg[r[k][:90]][0] += 1
    agg[r[k][:90]][1] += ns / 1e3
total = sum(v[1] for v in agg.values())
n = sum(v[0] for v in agg.values())
print(f"{n} kernel launches, {total:.0f} us of GPU time in all, {sys.argv[2]} training steps")
print(f"{'launches':>8} {'total us':>10} {'mean us':>9} {'share':>6}  kernel")
for name, (c, us) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:40]:
    print(f"{c:>8} {us:>10.1f} {us / c:>9.2f} {100 * us / total:>5.1f}%  {name}")
PY
