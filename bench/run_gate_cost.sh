#!/usr/bin/env bash
# What the teacher gate (codistill.gate) costs a live cohort, and that it refuses none of
# its honest peers: two workers codistill on the two cores (launch_local.sh, one thread
# each) with checkpoint.every = codistill.reload_every = 50, so that every reload brings
# a new checkpoint from each peer and the gate scores it. Gate on and off alternate,
# REPEATS rounds each. Per run and worker: the probe time the `teacher` events report
# against the run's wall time, teachers accepted and refused, and the final test
# accuracy (or held-out loss for text).
#   bench/run_gate_cost.sh [CONFIG...]   (default: configs/fmnist_mlp.yaml configs/text_gpt.yaml)
# Environment: REPEATS (3), STEPS (per config: 6000 for the MLP, 300 otherwise), BUILD_DIR,
#   RESULTS_DIR (bench/results), NAME (gate_cost).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source "$root/bench/raw_log.sh"
export BUILD_DIR="$(realpath -m "${BUILD_DIR:-$root/build}")"
repeats="${REPEATS:-3}"
configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(configs/fmnist_mlp.yaml configs/text_gpt.yaml)
open_raw_log "${NAME:-gate_cost}" "${RESULTS_DIR:-$root/bench/results}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
{
  echo "# teacher gate cost: 2 live workers, checkpoint.every = reload_every = 50, gate on/off alternating, $repeats rounds"
  echo "# date $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!bench/results' || echo -dirty), cpu $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
} | log
for cfg in "${configs[@]}"; do
  name="$(basename "$cfg" .yaml)"
  steps="${STEPS:-}"
  [ -z "$steps" ] && { case "$name" in *mlp*) steps=6000 ;; *) steps=300 ;; esac; }
  for ((r = 1; r <= repeats; r++)); do
    for gate in on off; do
      dir="$work/$name-$gate-$r"
      enabled=true
      [ "$gate" = off ] && enabled=false
      "$root/scripts/launch_local.sh" "$cfg" 2 --run-dir "$dir" --set run.threads=1 --set codistill.enabled=true \
        --set train.steps="$steps" --set codistill.burn_in=$((steps / 6)) --set codistill.reload_every=50 \
        --set checkpoint.every=50 --set checkpoint.keep=2 --set codistill.gate.enabled="$enabled" \
        >"$dir.log" 2>&1 || { tail -20 "$dir.log" >&2; exit 1; }
      /usr/bin/python3 - "$dir" "$name" "$gate" "$r" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY' | log
import json, os, sys
run, name, gate, r, load = sys.argv[1:6]
for w in sorted(d for d in os.listdir(run) if d.startswith("worker-")):
    ev = [json.loads(l) for l in open(os.path.join(run, w, "metrics.jsonl"))]
    done = [e for e in ev if e["event"] == "done"][-1]
    t = [e for e in ev if e["event"] == "teacher"]
    probe_s = sum(e.get("probe_ms", 0) for e in t) / 1000
    quality = "accuracy %.2f%%" % (100 * done["accuracy"]) if "perplexity" not in done else "held-out loss %.4f" % done["loss"]
    print("%s gate %-3s round %s %s: wall %.1f s, probe %.3f s (%.2f%%), teachers accepted %d refused %d, %s; load %s"
          % (name, gate, r, w, done["wall_s"], probe_s, 100 * probe_s / done["wall_s"],
             sum(1 for e in t if not e.get("refused")), sum(1 for e in t if e.get("refused")), quality, load))
PY
    done
  done
done
