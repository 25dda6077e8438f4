#!/usr/bin/env bash
# The worker-group kinds on a one-GPU machine, end to end: configs/fmnist_resnet8.yaml (batch
# norm, synchronized across the group: group.sync_batchnorm) trained on cuda under
# `mpirun -np 1` with group.kind mpi and with group.kind nccl, then the two runs' logged
# training losses set side by side. With one rank every sum is the identity, so the two must
# train identically; what the nccl run adds is the communicator's bootstrap through MPI, its
# stream and events, and the host collectives it routes through its mpi group. Prints each
# run's examples/s. (Two ranks need two GPUs: NCCL refuses two ranks on one device.)
#   bench/run_gpu_group.sh [STEPS]          (default 300)
# Environment: KINDS ("mpi nccl": the two kinds compared), DEVICE (cuda; cpu with KINDS
# "mpi single" is this script's own smoke test on a machine without a GPU).
# Uses the bundle (scripts/bundle.sh; its env.sh puts the bundled OpenMPI first) and its
# data/fashion-mnist.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
steps="${1:-300}"
read -ra kinds <<<"${KINDS:-mpi nccl}"
device="${DEVICE:-cuda}"
# shellcheck source=/dev/null
source bundle/env.sh
work="$(mktemp -d)"
rc=0
for kind in "${kinds[@]}"; do
  echo "== group.kind $kind, mpirun -np 1, $steps steps on $device"
  t0=$(date +%s)
  timeout 120 mpirun --allow-run-as-root -np 1 bundle/bin/codistill-train --config configs/fmnist_resnet8.yaml \
    --run-dir "$work/$kind" --device "$device" --set group.kind="$kind" --set group.sync_batchnorm=true \
    --set data.path="$root/bundle/data/fashion-mnist" --set train.steps="$steps" --set train.log_every=50 \
    --set train.eval_every="$steps" >"$work/$kind.out" 2>&1
  r=$?
  echo "exit $r after $(($(date +%s) - t0)) s"
  grep -iE "group|nccl|error|examples/s" "$work/$kind.out" | head -n 12
  [ $r -eq 0 ] || { rc=1; tail -n 20 "$work/$kind.out"; }
done
"${PYTHON:-python3}" - "$work" "${kinds[@]}" <<'PY' || rc=1
import json, pathlib, sys
work = pathlib.Path(sys.argv[1])
ka, kb = sys.argv[2], sys.argv[3]
def events(kind):
    f = next((work / kind).rglob("metrics.jsonl"), None)
    if f is None:
        sys.exit(f"no metrics.jsonl for {kind}")
    return [json.loads(l) for l in f.read_text().splitlines() if l.strip()]
runs = {k: events(k) for k in (ka, kb)}
train = {k: [e for e in v if e.get("event") == "train"] for k, v in runs.items()}
evals = {k: [e for e in v if e.get("event") == "eval"] for k, v in runs.items()}
worst = 0.0
for a, b in zip(train[ka], train[kb]):
    d = abs(a["loss"] - b["loss"]) / max(abs(a["loss"]), 1e-12)
    worst = max(worst, d)
    print(f"step {a['step']:5d}  loss {ka} {a['loss']:.6f}  {kb} {b['loss']:.6f}  "
          f"ex/s {ka} {a.get('examples_per_s', 0):9.0f}  {kb} {b.get('examples_per_s', 0):9.0f}")
for a, b in zip(evals[ka], evals[kb]):
    print(f"eval step {a['step']}: {ka} {json.dumps({k: a[k] for k in a if 'loss' in k or 'acc' in k})}"
          f"  {kb} {json.dumps({k: b[k] for k in b if 'loss' in k or 'acc' in k})}")
n = min(len(train[ka]), len(train[kb]))
print(f"{n} logged steps compared; largest relative loss difference {worst:.3g}")
sys.exit(0 if n > 0 and worst <= 1e-6 else 1)
PY
echo "run_gpu_group.sh: $([ $rc -eq 0 ] && echo ok || echo FAILED)"
exit $rc
