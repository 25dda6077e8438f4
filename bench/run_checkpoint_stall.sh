#!/usr/bin/env bash
# Checkpoint stall benchmark: how much training time a checkpoint of a 100M-parameter
# model costs, asynchronous (on the CPU the next step's update is out of place and the state
# it read is written on a background thread; builds before 2026-11-28 copied the state behind
# the next step's passes) vs synchronous (written on the training thread), side by side in
# one run. Reads the `checkpoint` events of metrics.jsonl (stall_ms); and, as a measure that
# does not rest on the trainer's own accounting, the training time from step 10 to the last
# step (the `train` events' times: set-up, the first steps and the final checkpoint left
# out) with async checkpoints against the same run with checkpoint.every 0 (only the final
# one), per periodic checkpoint: that includes what a copy behind the passes took from them
# and the writer thread's share of the 2 cores. Writes bench/results/checkpoint_stall.json
# and .txt.
# Environment: BUILD_DIR (build/), SKIP_BUILD=1 (use BUILD_DIR as it is), REPEATS (1) rounds,
# BEFORE_BUILD=DIR a second build (an older commit) measured in the same rounds, alternating.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
"$root/scripts/setup.sh"
build="${BUILD_DIR:-$root/build}"
[ "${SKIP_BUILD:-0}" = 1 ] || BUILD_DIR="$build" "$root/scripts/build.sh" >/dev/null
repeats="${REPEATS:-1}"
labels=(codistill); dirs=("$build")
if [ -n "${BEFORE_BUILD:-}" ]; then labels+=(codistill-before); dirs+=("$BEFORE_BUILD"); fi
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
  for r in $(seq 1 "$repeats"); do
    for k in "${!labels[@]}"; do
      i=$(( (k + r - 1) % ${#labels[@]} ))  # the order rotates each round
      modes=(true false none)
      for m in 0 1 2; do
        mode=${modes[$(( (m + r - 1) % 3 ))]}  # the modes' order rotates too
        set_mode=(--set checkpoint.async=$mode)
        [ "$mode" = none ] && set_mode=(--set checkpoint.every=0)
        echo "-- round $r ${labels[$i]} ${set_mode[1]} (load $(cut -d' ' -f1-3 /proc/loadavg))"
        "${dirs[$i]}/trainer/codistill-train" --config "$out/big.yaml" --run-dir "$out/${labels[$i]}-$r-async-$mode" \
          "${set_mode[@]}" | grep -E "checkpoint|done:" || true
      done
    done
  done
} | tee "$raw"
/usr/bin/python3 - "$out" "$raw" "$repeats" "${labels[@]}" <<'PY'
import json, sys, subprocess, datetime, statistics
out, raw, repeats, labels = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
def events(label, r, mode, kind="checkpoint"):
    return [json.loads(l) for l in open(f"{out}/{label}-{r}-async-{mode}/worker-000/metrics.jsonl") if f'"{kind}"' in l]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
doc = {"benchmark": "checkpoint_stall", "device": cpu, "date": datetime.date.today().isoformat(),
       "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
       "parameters": 100110010, "rounds": repeats, "contenders": {}}
lines = []
for label in labels:
    stalls, writes, rounds, walls = [], [], [], []
    for r in range(1, repeats + 1):
        a, s = events(label, r, "true"), events(label, r, "false")
        # Periodic checkpoints only: the final one has no next step to hide behind.
        final = max(e["step"] for e in a)
        periodic = sum(1 for e in a if e["step"] != final)
        stall = statistics.mean(e["stall_ms"] for e in a if e["step"] != final)
        write = statistics.mean(e["write_ms"] for e in s if e["step"] != final)
        def train_s(mode):  # from the train event of step 10 to that of the last step
            t = {e["step"]: e["time"] for e in events(label, r, mode, "train")}
            return t[max(t)] - t[10]
        wall_async, wall_none = train_s("true"), train_s("none")
        per_ckpt = 1000 * (wall_async - wall_none) / max(periodic, 1)
        stalls.append(stall)
        writes.append(write)
        walls.append(per_ckpt)
        rounds.append({"async_events": a, "sync_events": s, "mean_async_stall_ms": stall, "mean_sync_write_ms": write,
                       "train_s_steps_10_to_61_async": wall_async, "train_s_steps_10_to_61_every_0": wall_none,
                       "run_ms_per_async_checkpoint": per_ckpt})
    doc["checkpoint_bytes"] = rounds[0]["async_events"][0]["bytes"]
    doc["contenders"][label] = {"rounds": rounds, "best_async_stall_ms": min(stalls),
                                "median_async_stall_ms": statistics.median(stalls),
                                "best_sync_write_ms": min(writes), "median_sync_write_ms": statistics.median(writes),
                                "best_run_ms_per_async_checkpoint": min(walls),
                                "median_run_ms_per_async_checkpoint": statistics.median(walls)}
    lines.append(f"{label:<17} checkpoint {doc['checkpoint_bytes']/1e6:.0f} MB: sync write best {min(writes):.0f} / median "
                 f"{statistics.median(writes):.0f} ms (training stalled all of it); async stall best {min(stalls):.1f} / "
                 f"median {statistics.median(stalls):.1f} ms = {100*statistics.median(stalls)/statistics.median(writes):.2f}% "
                 f"of the sync write; training time per async checkpoint (steps 10-61 vs every 0) best "
                 f"{min(walls):.0f} / median {statistics.median(walls):.0f} ms")
json.dump(doc, open("bench/results/checkpoint_stall.json", "w"), indent=2)
print("\n".join(lines))
open(raw, "a").write("\n".join(lines) + "\n")
PY
