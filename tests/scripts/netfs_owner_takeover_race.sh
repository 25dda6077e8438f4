#!/usr/bin/env bash
# Two "nodes" take over one stale owner file at the same moment, each through its own
# mount of one network volume and with its own host name (unshare -u). The owner file is
# left by a dead host node-a (heartbeat an hour old). Exactly one of node-b and node-c
# must train; the other must refuse (exit 2) naming the winner, not give up with "other
# processes keep claiming it". Exit 1 if any try broke either rule. Manual, needs root; not a
# CTest test.
#   tests/scripts/netfs_owner_takeover_race.sh TRAINER MOUNT_A MOUNT_B MOUNT_C [TRIES]
set -uo pipefail
[ $# -ge 4 ] || { echo "usage: $0 TRAINER MOUNT_A MOUNT_B MOUNT_C [TRIES]" >&2; exit 2; }
trainer="$1" a="$2" b="$3" c="$4" tries="${5:-5}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
both=0 none=0 gave_up=0
for ((t = 1; t <= tries; t++)); do
  rel="takeover-$$-$t"
  mkdir -p "$a/$rel/run/worker-000"
  cat >"$a/$rel/c.yaml" <<'YAML'
run: {seed: 4, threads: 1}
data: {kind: synthetic, batch_size: 64, synthetic_train: 4096, synthetic_test: 256, synthetic_shape: [1, 16, 16]}
model: {kind: mlp, hidden: [64]}
optimizer: {kind: sgd, lr: 0.05}
train: {steps: 10000000, eval_every: 1000000, log_every: 1000}
checkpoint: {every: 100000}
YAML
  echo '{"host":"node-a","pid":12345,"started_unix":1000}' >"$a/$rel/run/worker-000/owner"
  touch -d '1 hour ago' "$a/$rel/run/worker-000/owner"
  cat "$b/$rel/run/worker-000/owner" "$c/$rel/run/worker-000/owner" >/dev/null  # both clients have it cached
  declare -A pid=()
  for n in b c; do
    m="$b"; [ "$n" = c ] && m="$c"
    unshare -u bash -c "hostname node-$n && exec \"\$@\"" _ "$trainer" --config "$m/$rel/c.yaml" --run-dir "$m/$rel/run" \
      >"$out/$n.out" 2>"$out/$n.err" &
    pid[$n]=$!
  done
  sleep 6
  running=0 line="try $t:"
  for n in b c; do
    if kill -0 "${pid[$n]}" 2>/dev/null; then
      line+=" node-$n trains;"
      running=$((running + 1))
    else
      wait "${pid[$n]}"
      line+=" node-$n exit $? ($(tail -1 "$out/$n.err" | cut -c1-160));"
    fi
  done
  echo "$line owner: $(cat "$a/$rel/run/worker-000/owner")"
  [ "$running" -eq 2 ] && both=$((both + 1))
  [ "$running" -eq 0 ] && none=$((none + 1))
  grep -q "keep claiming" "$out/b.err" "$out/c.err" && gave_up=$((gave_up + 1))
  kill "${pid[b]}" "${pid[c]}" 2>/dev/null
  wait 2>/dev/null
  rm -rf "${a:?}/$rel"
done
echo "both trained in $both of $tries tries; neither in $none; a loser gave up ('keep claiming') in $gave_up"
[ "$both" -eq 0 ] && [ "$none" -eq 0 ] && [ "$gave_up" -eq 0 ]
