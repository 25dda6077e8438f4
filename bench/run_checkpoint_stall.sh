#!/usr/bin/env bash
# Checkpoint stall benchmark: how much training time a checkpoint of a 100M-parameter
# model costs, asynchronous (snapshot copied behind the next step's passes, written on a
# background thread) vs synchronous (written on the training thread), side by side in one
# run. Reads the `checkpoint` events of metrics.jsonl; writes
# bench/results/checkpoint_stall.json and .txt.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
"$root/scripts/setup.sh"
"$root/scripts/build.sh" >/dev/null
out="$(mktemp -d "${TMPDIR:-/tmp}/codistill-stall.XXXXXX")"
trap 'rm -rf "$out"' EXIT
cat >"$out/big.yaml" <<'YAML'
run: {seed: 1, threads: 2}
data: {kind: synthetic, batch_size: 16, synthetic_train: 512, synthetic_test: 256, synthetic_shape: [1, 100, 100]}
model: {kind: mlp, hidden: [10000]}         # 10000*10000 + 10000*10 + biases = 100.11M parameters
optimizer: {kind: sgd, lr: 0.001, momentum: 0.9}   # + 100.11M momentum values in the checkpoint
train: {steps: 61, eval_every: 0, log_every: 10}
checkpoint: {every: 20, keep: 1}     # far enough apart that writes do not queue
YAML
raw="$root/bench/results/checkpoint_stall.txt"
{
  echo "== checkpoint stall, 100M-parameter MLP, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)"
  for mode in true false; do
    echo "-- checkpoint.async=$mode"
    build/trainer/codistill-train --config "$out/big.yaml" --run-dir "$out/async-$mode" \
      --set checkpoint.async=$mode | grep -E "checkpoint|done:" || true
  done
} | tee "$raw"
/usr/bin/python3 - "$out" "$raw" <<'PY'
import json, sys, subprocess, datetime, statistics
out, raw = sys.argv[1], sys.argv[2]
def events(mode):
    return [json.loads(l) for l in open(f"{out}/async-{mode}/worker-000/metrics.jsonl") if '"checkpoint"' in l]
a, s = events("true"), events("false")
# Periodic checkpoints only: the final one has no next step to hide behind.
final = max(e["step"] for e in a)
a_periodic = [e for e in a if e["step"] != final]
sync_write = statistics.mean(e["write_ms"] for e in s if e["step"] != final)
stall = statistics.mean(e["stall_ms"] for e in a_periodic)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
doc = {"benchmark": "checkpoint_stall", "device": cpu, "date": datetime.date.today().isoformat(),
       "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
       "parameters": 100110010, "checkpoint_bytes": a[0]["bytes"],
       "async_events": a, "sync_events": s,
       "mean_async_stall_ms": stall, "mean_sync_write_ms": sync_write, "stall_fraction": stall / sync_write}
json.dump(doc, open("bench/results/checkpoint_stall.json", "w"), indent=2)
line = (f"checkpoint {a[0]['bytes']/1e6:.0f} MB: sync write {sync_write:.0f} ms (training stalled all of it); "
        f"async stall {stall:.1f} ms = {100*stall/sync_write:.2f}% of the sync write "
        f"(async write on the background thread {statistics.mean(e['write_ms'] for e in a_periodic):.0f} ms)")
print(line)
open(raw, "a").write(line + "\n")
PY
