#!/usr/bin/env bash
# Training benchmark on a CUDA GPU, in one run:
#  1. throughput, side by side: codistill-train --device cuda and the PyTorch reference
#     (bench/torch_train.py --device cuda) train the same config (model, hyper-parameters,
#     steps, schedule) at batch BATCH (256) on Fashion-MNIST; the ratio of their training
#     examples/s (evaluation excluded on both sides);
#  2. the cost of codistillation: one worker's step time with K = 0, 1, 2 teachers. The
#     peers' checkpoints are made first by short CPU runs of workers 1 and 2 (a side run
#     directory, copied into each measured run), so the measured worker 0 runs alone on the
#     GPU with codistill.enabled=true and burn_in=0 (K = 0: codistillation off). Step time =
#     BATCH / the median examples_per_s of its train events (every 100 steps) that used K
#     teachers, the first such window left out (warm-up, teacher loading); it is set against
#     the step time without teachers and the budget 1 + 0.4 K.
# Prints the tables; writes bench/results/train_cuda.json and bench/results/train_cuda.txt
# (raw output), with the GPU, driver and commit.
#   bench/run_train_bench_cuda.sh [CONFIG...]   (default: configs/fmnist_mlp.yaml configs/fmnist_cnn.yaml)
# Where the programs come from: BUNDLE (default <repo>/bundle when it holds
# bin/codistill-train; scripts/bundle.sh) or else BUILD_DIR (default build/), built here.
# Environment: PYTHON (default python3, with torch), DATA (the Fashion-MNIST folder; default
# /usr/share/datasets/fashion-mnist when it exists, else BUNDLE/data/fashion-mnist), BATCH
# (256), STEPS (default: each config's train.steps, for part 1), OVERHEAD_STEPS (3000), KS
# ("0 1 2"), DEVICE (cuda; cpu runs the same on the CPU, a smoke test), TF32 (1: allow TF32
# on both sides; default off, as the configs), NAME (default train_cuda), COPY_TO (also copy
# the result files into this folder, e.g. "$OUT").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
name="${NAME:-train_cuda}"
batch="${BATCH:-256}"
device="${DEVICE:-cuda}"
overhead_steps="${OVERHEAD_STEPS:-3000}"
ks="${KS:-0 1 2}"
configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(configs/fmnist_mlp.yaml configs/fmnist_cnn.yaml)

bundle="${BUNDLE:-}"
[ -z "$bundle" ] && [ -x "$root/bundle/bin/codistill-train" ] && bundle="$root/bundle"
if [ -n "$bundle" ]; then
  bundle="$(cd "$bundle" && pwd)"
  # shellcheck source=/dev/null
  source "$bundle/env.sh"
  train="$bundle/bin/codistill-train"
else
  build="${BUILD_DIR:-$root/build}"
  [ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" --target codistill-train -j "${JOBS:-$(nproc)}" >/dev/null
  train="$build/trainer/codistill-train"
fi
data="${DATA:-}"
if [ -z "$data" ]; then
  data=/usr/share/datasets/fashion-mnist
  [ -f "$data/train-images-idx3-ubyte.gz" ] || data="${bundle:-$root/bundle}/data/fashion-mnist"
fi
[ -f "$data/train-images-idx3-ubyte.gz" ] ||
  { echo "run_train_bench_cuda.sh: no Fashion-MNIST in $data (set DATA, or scripts/bundle.sh copies it)" >&2; exit 2; }

gpu="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)"
[ "$device" = cpu ] && gpu="cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), -"
. "$root/bench/provenance.sh"
bench_commit "$bundle"
tf32=(); torch_tf32=()
[ "${TF32:-0}" = 1 ] && tf32=(--set train.allow_tf32=true) && torch_tf32=(--tf32)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p bench/results
. "$root/bench/raw_log.sh"
open_raw_log "$name"
export PYTHONUNBUFFERED=1
echo "gpu: ${gpu:-unknown}; commit: ${commit:-unknown}; codistill-train: $train${bundle_commit:+ (bundle built from $bundle_commit)}; data: $data; batch $batch" | log
status=0
# run LABEL CMD...: runs CMD, its output into the raw file (the summary lines on the screen);
# a failure is reported and remembered, and the benchmark goes on with the next run.
run() {
  local label="$1"; shift
  if "$@" >"$work/out.txt" 2>&1; then
    cat "$work/out.txt" >>"$raw"
    grep -E "^summary|done:" "$work/out.txt" || true
  else
    cat "$work/out.txt" >>"$raw"
    tail -n 20 "$work/out.txt" >&2
    echo "run_train_bench_cuda.sh: $label FAILED" | log >&2
    status=1
  fi
}

common=(--device "$device" --set "data.batch_size=$batch" --set "data.path=$data" "${tf32[@]}")
for cfg in "${configs[@]}"; do
  cname="$(basename "$cfg" .yaml)"
  steps_args=() py_steps=()
  [ -n "${STEPS:-}" ] && steps_args=(--set "train.steps=$STEPS") && py_steps=(--steps "$STEPS")
  echo "== $cname: codistill ($device, batch $batch)" | log
  run "$cname codistill" "$train" --config "$cfg" --run-dir "$work/$cname" "${common[@]}" "${steps_args[@]}"
  echo "== $cname: pytorch ($device, batch $batch)" | log
  run "$cname pytorch" "$python" bench/torch_train.py "$cfg" --device "$device" --batch "$batch" \
    --data-path "$data" "${torch_tf32[@]}" "${py_steps[@]}"
  grep '^{' "$work/out.txt" | tail -n 1 >"$work/$cname.torch.json" || true

  # Peers for the overhead runs: workers 1 and 2 of a 3-worker run, a few CPU steps each
  # (only their checkpoints matter: same model section, hence the same fingerprint).
  peers=(--device cpu --set "data.batch_size=$batch" --set "data.path=$data" --set train.steps=10
         --set train.eval_every=0 --set data.test_limit=500 --set checkpoint.every=0 --workers 3)
  echo "== $cname: peers 1 and 2 (cpu, 10 steps), teachers of the runs below" | log
  for p in 1 2; do
    run "$cname peer $p" "$train" --config "$cfg" --run-dir "$work/$cname-peers" --worker "$p" "${peers[@]}"
  done
  for k in $ks; do
    rdir="$work/$cname-k$k"
    codistill=(--set codistill.enabled=false --workers 1)
    if [ "$k" -gt 0 ]; then
      codistill=(--set codistill.enabled=true --set codistill.burn_in=0 --workers $((k + 1)))
      for ((p = 1; p <= k; p++)); do
        peer_dir="$(printf 'worker-%03d' "$p")"
        mkdir -p "$rdir/$peer_dir"
        cp "$work/$cname-peers/$peer_dir"/ckpt-*.h5 "$rdir/$peer_dir/" 2>/dev/null || true
      done
    fi
    echo "== $cname: codistill with K=$k teachers ($device, batch $batch, $overhead_steps steps)" | log
    run "$cname K=$k" "$train" --config "$cfg" --run-dir "$rdir" --worker 0 "${common[@]}" "${codistill[@]}" \
      --set "train.steps=$overhead_steps" --set train.log_every=100 --set train.eval_every=0 \
      --set checkpoint.every=0 --set data.shard=full
  done
done

"$python" - "$work" "$raw" "$batch" "$device" "$gpu" "${commit:-unknown}" "$name" "$ks" "${bundle_commit:-}" \
  "${configs[@]}" <<'PY'
import datetime, json, os, platform, statistics, sys
work, raw, batch, device, gpu, commit, name, ks, bundle_commit = sys.argv[1:10]
configs = sys.argv[10:]
batch, ks = int(batch), [int(k) for k in ks.split()]
gpu_name, _, driver = gpu.partition(",")

def events(path, kind):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [e for e in map(json.loads, f) if e.get("event") == kind]


def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None

throughput, overhead = [], []
for cfg in configs:
    cname = os.path.basename(cfg)[:-5]
    done = (events(f"{work}/{cname}/worker-000/metrics.jsonl", "done") or [None])[-1]
    torch = load(f"{work}/{cname}.torch.json")
    throughput.append({
        "config": cfg, "steps": done["step"] if done else None, "batch": batch,
        "codistill": {"train_examples_per_s": done["train_examples_per_s"], "test_accuracy": done["accuracy"],
                      "wall_s": done["wall_s"]} if done else None,
        "pytorch": {"train_examples_per_s": torch["train_examples_per_s"], "test_accuracy": torch["test_accuracy"],
                    "train_s": torch["train_s"], "version": torch["torch"], "tf32": torch.get("tf32")} if torch else None,
        "throughput_ratio": done["train_examples_per_s"] / torch["train_examples_per_s"] if done and torch else None})
    base = None
    for k in ks:
        train = events(f"{work}/{cname}-k{k}/worker-000/metrics.jsonl", "train")
        used = [e for e in train if e.get("teachers", 0) == k][1:]
        row = {"config": cfg, "K": k, "windows": len(used), "steps_per_window": 100}
        if used:
            eps = statistics.median(e["examples_per_s"] for e in used)
            row.update({"examples_per_s": eps, "step_ms": 1e3 * batch / eps,
                        "step_ms_min": min(1e3 * batch / e["examples_per_s"] for e in used),
                        "step_ms_max": max(1e3 * batch / e["examples_per_s"] for e in used)})
            if k == 0:
                base = row["step_ms"]
            if base:
                row["ratio_to_k0"] = row["step_ms"] / base
                row["budget"] = 1 + 0.4 * k
                row["within_budget"] = row["ratio_to_k0"] <= row["budget"]
        else:
            row["error"] = f"no train event with {k} teachers after the first (see the raw output)"
        overhead.append(row)

doc = {"benchmark": name, "device": device, "gpu": gpu_name.strip(), "driver": driver.strip(),
       "commit": commit, "bundle_commit": bundle_commit or None,
       "date": datetime.datetime.now().isoformat(timespec="seconds"), "host": platform.node(),
       "batch": batch,
       "method": {"throughput": "train_examples_per_s of codistill's done event vs torch_train.py's (evaluation "
                                "excluded on both sides); same config, steps and batch",
                  "overhead": "worker 0 alone on the device with K peers' checkpoints (made by short CPU runs) "
                              "as teachers from step 0; step time = batch / median examples_per_s of its train "
                              "events with K teachers, first one left out; budget 1 + 0.4 K"},
       "throughput": throughput, "codistill_overhead": overhead}
json.dump(doc, open(f"bench/results/{name}.json", "w"), indent=2)
lines = [f"{gpu_name.strip()} (driver {driver.strip()}), {device}, batch {batch}, commit {commit}",
         f"{'config':<14} {'steps':>6} {'codistill ex/s':>15} {'pytorch ex/s':>13} {'ratio':>6} "
         f"{'acc ours':>9} {'acc torch':>9} {'wall s':>7}"]
for r in throughput:
    c, t = r["codistill"] or {}, r["pytorch"] or {}
    def f(x, spec):
        return format(x, spec) if x is not None else "FAILED"
    lines.append(f"{os.path.basename(r['config'])[:-5]:<14} {f(r['steps'], 'd'):>6} "
                 f"{f(c.get('train_examples_per_s'), '.0f'):>15} {f(t.get('train_examples_per_s'), '.0f'):>13} "
                 f"{f(r['throughput_ratio'], '.2f'):>6} "
                 f"{f(c.get('test_accuracy', 0) * 100 if c else None, '.2f'):>8}% "
                 f"{f(t.get('test_accuracy', 0) * 100 if t else None, '.2f'):>8}% {f(c.get('wall_s'), '.1f'):>7}")
lines.append("codistillation cost: step time with K teachers (median over train windows of 100 steps)")
lines.append(f"{'config':<14} {'K':>2} {'step ms':>9} {'(min':>8} {'max)':>8} {'vs K=0':>7} {'budget':>7} {'ok':>4}")
for r in overhead:
    cname = os.path.basename(r["config"])[:-5]
    if "step_ms" not in r:
        lines.append(f"{cname:<14} {r['K']:>2} {r.get('error')}")
        continue
    ratio = f"{r['ratio_to_k0']:.2f}x" if "ratio_to_k0" in r else "-"
    budget = f"{r['budget']:.1f}x" if "budget" in r else "-"
    ok = ("yes" if r["within_budget"] else "NO") if "within_budget" in r else "-"
    lines.append(f"{cname:<14} {r['K']:>2} {r['step_ms']:>9.3f} {r['step_ms_min']:>8.3f} {r['step_ms_max']:>8.3f} "
                 f"{ratio:>7} {budget:>7} {ok:>4}")
print("\n".join(lines))
with open(raw, "a") as f:
    f.write("== summary\n" + "\n".join(lines) + "\n")
PY
if [ -n "${COPY_TO:-}" ]; then
  cp "bench/results/$name.json" "$raw" "$COPY_TO/" || status=1
fi
exit "$status"
