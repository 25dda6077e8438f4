#!/usr/bin/env bash
# The owner file between two "nodes": two mounts of one network volume (scripts/netfs.sh
# mount, twice) and two host names (each trainer in its own UTS namespace, unshare -u), so
# that the second trainer judges the first's owner file by its heartbeat (mtime), as on a
# cluster. A manual check, not a CTest test; needs root (unshare, hostname).
#   tests/scripts/netfs_owner_two_nodes.sh TRAINER MOUNT_A MOUNT_B
# 1. node-a trains worker 0 with the run directory through MOUNT_A;
# 2. node-b, through MOUNT_B, starts the same worker: must refuse (exit 2) naming node-a;
# 3. node-b watches the owner file's age through MOUNT_B for ~25 s (heartbeat every 10 s);
# 4. node-a is killed with SIGKILL; node-b at once: still refused (heartbeat fresh);
# 5. once the owner's mtime is over 120 s old, node-b starts: takes over and trains;
#    SIGTERM: it exits 0 and its owner file is gone.
set -uo pipefail
[ $# -eq 3 ] || { echo "usage: $0 TRAINER MOUNT_A MOUNT_B" >&2; exit 2; }
trainer="$1" a="$2" b="$3"
rel="owner-two-nodes-$$"
mkdir -p "$a/$rel"
cat >"$a/$rel/c.yaml" <<'YAML'
run: {seed: 4, threads: 1}
data: {kind: synthetic, batch_size: 64, synthetic_train: 4096, synthetic_test: 256, synthetic_shape: [1, 16, 16]}
model: {kind: mlp, hidden: [64]}
optimizer: {kind: sgd, lr: 0.05}
train: {steps: 10000000, eval_every: 1000000, log_every: 1000}
checkpoint: {every: 2000}
YAML
node() {  # node NAME MOUNT: runs the trainer as host NAME on MOUNT's view of the run (exec:
  # started with &, its pid is the trainer's)
  local name="$1" mnt="$2"
  shift 2
  exec unshare -u bash -c "hostname $name && exec \"\$@\"" _ \
    "$trainer" --config "$mnt/$rel/c.yaml" --run-dir "$mnt/$rel/run" "$@"
}
owner_b="$b/$rel/run/worker-000/owner"
age_b() { echo $(($(date +%s) - $(stat -c %Y "$owner_b"))); }
t0=$(date +%s)
ts() { echo "[$(($(date +%s) - t0)) s]"; }

node node-a "$a" >"$a/$rel/a.out" 2>"$a/$rel/a.err" &
pid_a=$!
for ((i = 0; i < 600; i++)); do [ -e "$a/$rel/run/worker-000/metrics.jsonl" ] && break; sleep 0.1; done
echo "$(ts) node-a trains (pid $pid_a); owner via B: $(cat "$owner_b" 2>&1)"

(node node-b "$b" >"$b/$rel/b1.out" 2>"$b/$rel/b1.err")
rc=$?
echo "$(ts) node-b while node-a runs: exit $rc : $(tail -1 "$b/$rel/b1.err")"

for ((i = 0; i < 5; i++)); do
  echo "$(ts) owner age via B: $(age_b) s, via A: $(($(date +%s) - $(stat -c %Y "$a/$rel/run/worker-000/owner"))) s"
  sleep 5
done

kill -KILL "$pid_a"
wait "$pid_a"
rc=$?
echo "$(ts) node-a killed (exit $rc); owner via B: $(cat "$owner_b" 2>&1), age $(age_b) s"
(node node-b "$b" >"$b/$rel/b2.out" 2>"$b/$rel/b2.err")
rc=$?
echo "$(ts) node-b right after the kill: exit $rc : $(tail -1 "$b/$rel/b2.err")"

while [ "$(age_b)" -le 120 ]; do sleep 1; done
echo "$(ts) owner age via B now $(age_b) s"
node node-b "$b" >"$b/$rel/b3.out" 2>"$b/$rel/b3.err" &
pid_b=$!
for ((i = 0; i < 600; i++)); do grep -q "resuming from\|training " "$b/$rel/b3.out" 2>/dev/null && break; sleep 0.1; done
sleep 3
echo "$(ts) node-b after the heartbeat went stale: running=$(kill -0 $pid_b 2>/dev/null && echo yes || echo no); owner via A: $(cat "$a/$rel/run/worker-000/owner" 2>&1)"
grep -m3 "resuming\|owner\|took over\|stale" "$b/$rel/b3.out" "$b/$rel/b3.err"
kill -TERM "$pid_b"
wait "$pid_b"
rc=$?
echo "$(ts) node-b SIGTERM: exit $rc; owner file left: $([ -e "$a/$rel/run/worker-000/owner" ] && echo yes || echo no) (via A), $([ -e "$b/$rel/run/worker-000/owner" ] && echo yes || echo no) (via B)"
ls -la "$a/$rel/run/worker-000/"
rm -rf "${a:?}/$rel"
