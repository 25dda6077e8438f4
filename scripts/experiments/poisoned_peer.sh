#!/usr/bin/env bash
# docs/results.md "A poisoned peer": a worker codistilling with a peer whose checkpoints are
# valid (they verify, load and fit) but whose model is broken, with the teacher gate on and
# off, against the same worker trained alone.
#   scripts/experiments/poisoned_peer.sh CONFIG OUT [train args...]
# POISONS (environment, default "scramble rotate nan untrained labels") and GATES (default
# "on off"; off is codistill.gate.enabled=false) choose the runs. scramble, rotate, nan and
# untrained are poison_checkpoint.py's kinds; labels is a peer trained on Fashion-MNIST
# with its training labels shuffled (FMNIST, default /usr/share/datasets/fashion-mnist).
#   1. OUT/indep: worker 0 of 2, codistillation off (the reference);
#   2. OUT/peer: worker 1 of 2 alone, codistillation on (it finds no peer), to the end
#      (OUT/peer-labels: the same on shuffled labels);
#   3. OUT/POISON-gate-G: a run directory holding a copy of the peer's folder with every
#      checkpoint poisoned, where worker 0 codistills (it finds the peer's freshest).
# Prints a table (final test accuracy, its difference to the reference, teachers accepted
# and refused, the gate's probe time against the run's) and writes OUT/results.json.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ $# -ge 2 ] || { echo "usage: $0 CONFIG OUT [train args...]" >&2; exit 2; }
config="$1" out="$2"; shift 2
train="${BUILD_DIR:-$root/build}/trainer/codistill-train"
poisons="${POISONS:-scramble rotate nan untrained labels}"
fmnist="${FMNIST:-/usr/share/datasets/fashion-mnist}"
gates="${GATES:-on off}"
mkdir -p "$out"
run() {  # DIR WORKER [args...]: one worker of a 2-worker run, its output in DIR.log
  local dir="$1" worker="$2"
  shift 2
  "$train" --config "$config" --run-dir "$dir" --worker "$worker" --workers 2 "$@" >"$dir.log" 2>&1 ||
    { echo "poisoned_peer.sh: the run in $dir failed (its log: $dir.log)" >&2; exit 1; }
}
if [ ! -f "$out/indep/done" ]; then
  rm -rf "${out:?}/indep"
  run "$out/indep" 0 --set codistill.enabled=false "$@"
  touch "$out/indep/done"
fi
peer() {  # NAME [args...]: worker 1 alone in OUT/NAME
  local name="$1"
  shift
  [ -f "$out/$name/done" ] && return 0
  rm -rf "${out:?}/$name"
  run "$out/$name" 1 --set codistill.enabled=true "$@"
  touch "$out/$name/done"
}
peer peer "$@"
if [[ " $poisons " == *" labels "* ]]; then
  # The peer's data: the same images, every training label drawn again at random.
  mkdir -p "$out/shuffled-labels"
  for f in t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz train-images-idx3-ubyte.gz; do
    ln -sf "$fmnist/$f" "$out/shuffled-labels/$f"
  done
  /usr/bin/python3 - "$fmnist/train-labels-idx1-ubyte.gz" "$out/shuffled-labels/train-labels-idx1-ubyte.gz" <<'PY'
import gzip, sys
import numpy as np
raw = gzip.open(sys.argv[1]).read()
labels = np.frombuffer(raw[8:], dtype=np.uint8).copy()
np.random.default_rng(7).shuffle(labels)
with gzip.open(sys.argv[2], "wb") as f:
    f.write(raw[:8] + labels.tobytes())
PY
  peer peer-labels "$@" --set data.path="$out/shuffled-labels"
fi
for poison in $poisons; do
  for gate in $gates; do
    case "$gate" in on) gate_args=() ;; off) gate_args=(--set codistill.gate.enabled=false) ;;
      *) echo "unknown gate setting '$gate' (valid: on, off)" >&2; exit 2 ;; esac
    dir="$out/$poison-gate-$gate"
    [ -f "$dir/done" ] && continue
    rm -rf "${dir:?}" && mkdir -p "$dir"
    if [ "$poison" = labels ]; then
      cp -r "$out/peer-labels/worker-001" "$dir/"
    else
      cp -r "$out/peer/worker-001" "$dir/"
      /usr/bin/python3 "$root/scripts/experiments/poison_checkpoint.py" "$poison" "$dir"/worker-001/ckpt-*.h5 \
        >"$dir.poison.log"
    fi
    rm -f "$dir/worker-001/owner"
    run "$dir" 0 --set codistill.enabled=true "${gate_args[@]}" "$@"
    touch "$dir/done"
  done
done
exec /usr/bin/python3 - "$out" "$poisons" "$gates" <<'PY'
import json, os, sys
out, poisons, gates = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def read(run):
    events = [json.loads(l) for l in open(os.path.join(out, run, "worker-000", "metrics.jsonl"))]
    done = [e for e in events if e["event"] == "done"][-1]
    teachers = [e for e in events if e["event"] == "teacher"]
    return {"accuracy": done["accuracy"], "wall_s": done["wall_s"],
            "accepted": sum(1 for t in teachers if not t.get("refused")),
            "refused": sum(1 for t in teachers if t.get("refused")),
            "probe_s": sum(t.get("probe_ms", 0) for t in teachers) / 1000,
            "reasons": sorted({t["reason"].split(" (")[0].split(" is ")[0] for t in teachers if t.get("refused")})}
ref = read("indep")
rows = {"indep": ref}
print("%-22s %9s %8s %8s %8s %8s" % ("run", "accuracy", "vs indep", "accepted", "refused", "probe %"))
print("%-22s %8.2f%% %8s %8s %8s %8s" % ("indep", 100 * ref["accuracy"], "", "", "", ""))
for p in poisons:
    for g in gates:
        r = read("%s-gate-%s" % (p, g))
        rows["%s-gate-%s" % (p, g)] = r
        print("%-22s %8.2f%% %+8.2f %8d %8d %8.2f" % ("%s, gate %s" % (p, g), 100 * r["accuracy"],
              100 * (r["accuracy"] - ref["accuracy"]), r["accepted"], r["refused"], 100 * r["probe_s"] / r["wall_s"]))
json.dump(rows, open(os.path.join(out, "results.json"), "w"), indent=1)
PY
