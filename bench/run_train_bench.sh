#!/usr/bin/env bash
# Training benchmark, side by side in one run: codistill-train and the PyTorch reference
# (bench/torch_train.py) train the same config (model, hyper-parameters, batch, steps,
# threads) on Fashion-MNIST. Prints a table with the throughput ratio and writes
# bench/results/train_cpu.json and bench/results/train_cpu.txt (raw output).
#   bench/run_train_bench.sh [CONFIG...]     (default: configs/fmnist_mlp.yaml configs/fmnist_cnn.yaml)
# Environment: THREADS (default 2), STEPS (default: each config's train.steps).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
"$root/scripts/setup.sh" --bench
"$root/scripts/build.sh" >/dev/null
threads="${THREADS:-2}"
configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(configs/fmnist_mlp.yaml configs/fmnist_cnn.yaml)
out="$(mktemp -d)"
raw="$root/bench/results/train_cpu.txt"
: >"$raw"
for cfg in "${configs[@]}"; do
  name="$(basename "$cfg" .yaml)"
  steps_args=()
  [ -n "${STEPS:-}" ] && steps_args=(--set "train.steps=$STEPS")
  echo "== $name: codistill" | tee -a "$raw"
  start=$(date +%s%N)
  build/trainer/codistill-train --config "$cfg" --run-dir "$out/$name" --set "run.threads=$threads" \
    "${steps_args[@]}" 2>&1 | tee -a "$raw" | grep -E "^summary|done:" || true
  end=$(date +%s%N)
  echo "process_wall_ms $(( (end - start) / 1000000 ))" | tee -a "$raw"
  echo "== $name: pytorch" | tee -a "$raw"
  py_steps=()
  [ -n "${STEPS:-}" ] && py_steps=(--steps "$STEPS")
  /usr/bin/python3 bench/torch_train.py "$cfg" --threads "$threads" "${py_steps[@]}" | tee -a "$raw" \
    >"$out/$name.torch.json"
done
/usr/bin/python3 - "$out" "$raw" "$threads" "${configs[@]}" <<'PY'
import json, os, platform, subprocess, sys, datetime
out, raw, threads, configs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
rows = []
for cfg in configs:
    name = os.path.basename(cfg)[:-5]
    done = [json.loads(l) for l in open(f"{out}/{name}/worker-000/metrics.jsonl") if '"done"' in l][-1]
    torch = json.load(open(f"{out}/{name}.torch.json"))
    rows.append({"config": cfg, "steps": done["step"],
                 "codistill": {"train_examples_per_s": done["train_examples_per_s"], "test_accuracy": done["accuracy"],
                               "wall_s": done["wall_s"]},
                 "pytorch": {"train_examples_per_s": torch["train_examples_per_s"], "test_accuracy": torch["test_accuracy"],
                             "train_s": torch["train_s"], "version": torch["torch"]},
                 "throughput_ratio": done["train_examples_per_s"] / torch["train_examples_per_s"]})
doc = {"benchmark": "train_cpu", "device": cpu, "threads": threads, "date": datetime.date.today().isoformat(),
       "commit": commit, "host": platform.node(), "results": rows}
json.dump(doc, open("bench/results/train_cpu.json", "w"), indent=2)
lines = [f"{'config':<14} {'steps':>6} {'codistill ex/s':>15} {'pytorch ex/s':>13} {'ratio':>6} "
         f"{'acc ours':>9} {'acc torch':>9} {'wall s':>7}"]
for r in rows:
    lines.append(f"{os.path.basename(r['config'])[:-5]:<14} {r['steps']:>6} {r['codistill']['train_examples_per_s']:>15.0f} "
                 f"{r['pytorch']['train_examples_per_s']:>13.0f} {r['throughput_ratio']:>6.2f} "
                 f"{100*r['codistill']['test_accuracy']:>8.2f}% {100*r['pytorch']['test_accuracy']:>8.2f}% "
                 f"{r['codistill']['wall_s']:>7.1f}")
print("\n".join(lines))
with open(raw, "a") as f:
    f.write("\n".join(lines) + "\n")
PY
rm -rf "$out"
