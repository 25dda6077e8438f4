#!/usr/bin/env bash
# docs/results.md "An elastic cohort": workers that join a running run and one that
# retires from it, in async mode and in sync mode with a quorum.
#   scripts/experiments/elastic_cohort.sh CONFIG OUT [train args...]
# For each MODE in MODES (default "async sync"), in OUT/MODE: workers 0 and 1 start
# (--workers 2, codistillation on); worker 2 joins (--workers 3, model.init_from=peers)
# once worker 0 has published a checkpoint at or past 1/4 of train.steps, worker 3
# (--workers 4) at 1/2; worker 1 retires at 3/4 (run.retire_at). Sync mode runs with
# codistill.sync_quorum=QUORUM (default 2). STEPS (default 2000) and EVERY (checkpoint.every
# and codistill.reload_every, default 50) set the length. Prints, per worker: its exit code,
# first and last step, the step it joined at, its first teacher after joining, its final
# accuracy; for sync mode, the reloads' waits and whether any waited for the retired worker;
# writes OUT/results.json.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ $# -ge 2 ] || { echo "usage: $0 CONFIG OUT [train args...]" >&2; exit 2; }
config="$1" out="$2"; shift 2
train="${BUILD_DIR:-$root/build}/trainer/codistill-train"
steps="${STEPS:-2000}" every="${EVERY:-50}" quorum="${QUORUM:-2}"
modes="${MODES:-async sync}"
export OMP_WAIT_POLICY=passive  # four workers on a few cores
mkdir -p "$out"

newest() {  # DIR WORKER: the newest published checkpoint step, or -1
  local f
  f="$(ls "$1/$(printf 'worker-%03d' "$2")" 2>/dev/null | grep -E '^ckpt-[0-9]+\.h5$' | sort | tail -n 1)"
  [ -n "$f" ] && echo $((10#${f:5:9})) || echo -1
}
wait_for() {  # DIR STEP: until worker 0 has published STEP or finished
  until [ "$(newest "$1" 0)" -ge "$2" ]; do sleep 0.2; done
}

for mode in $modes; do
  dir="$out/$mode"
  rm -rf "$dir"
  mkdir -p "$dir"
  common=(--config "$config" --run-dir "$dir" --set codistill.enabled=true --set train.steps="$steps"
          --set checkpoint.every="$every" --set codistill.reload_every="$every" --set codistill.burn_in="$every"
          --set codistill.mode="$mode" --set run.threads=1)
  [ "$mode" = sync ] && common+=(--set codistill.sync_quorum="$quorum" --set codistill.sync_timeout_s=300)
  start() {  # WORKER WORKERS [args...]
    local w="$1" n="$2"
    shift 2
    "$train" "${common[@]}" --worker "$w" --workers "$n" "$@" >"$dir/w$w.log" 2>&1 &
    echo $! >"$dir/w$w.pid"
    date +%s.%N >"$dir/w$w.started"
  }
  start 0 2 "$@"
  start 1 2 --set run.retire_at=$((3 * steps / 4)) "$@"
  wait_for "$dir" $((steps / 4))
  start 2 3 --set model.init_from=peers "$@"
  wait_for "$dir" $((steps / 2))
  start 3 4 --set model.init_from=peers "$@"
  for w in 0 1 2 3; do
    rc=0
    wait "$(cat "$dir/w$w.pid")" || rc=$?
    echo "$rc" >"$dir/w$w.exit"
  done
done

/usr/bin/python3 - "$out" "$steps" "$every" $modes <<'PY'
import json, pathlib, sys
out, steps, every, modes = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
results = {}
for mode in modes:
    d = out / mode
    rows = []
    for w in range(4):
        ev = [json.loads(l) for l in (d / f"worker-{w:03d}" / "metrics.jsonl").read_text().splitlines() if l.strip()]
        trains = [e for e in ev if e["event"] == "train"]
        joined = next((e for e in ev if e["event"] == "cohort" and e.get("joined") == [w] and "from" in e), None)
        start = joined["step"] if joined else 0
        teach = [e for e in ev if e["event"] == "teacher" and not e.get("refused", False)]
        first = next((e["step"] for e in teach if e["step"] >= start), None)
        done = next((e for e in ev if e["event"] == "done"), {})
        syncs = [e for e in ev if e["event"] == "sync"]
        retired_step = next((e["step"] for e in ev if e["event"] == "cohort" and 1 in e.get("retired", [])), None)
        # Reloads after this worker saw worker 1 retire that still counted it among those waited for.
        waited_for_retired = [e["step"] for e in syncs if retired_step is not None and e["step"] > retired_step
                              and 1 not in e.get("not_waited", [])]
        rows.append({
            "worker": w, "exit": int((d / f"w{w}.exit").read_text()),
            "first_step": trains[0]["step"] if trains else None, "last_step": done.get("step"),
            "joined_at": joined["step"] if joined else None,
            "first_teacher_step": first,
            "teacher_delay": (first - start) if (joined and first is not None) else None,
            "teacher_peers": sorted({e["peer"] for e in teach}),
            "accuracy": done.get("accuracy"), "retired": done.get("retired", False),
            "sync_reloads": len(syncs),
            "sync_waited_ms_max": max((e["waited_ms"] for e in syncs), default=None),
            "sync_waited_ms_median": sorted(e["waited_ms"] for e in syncs)[len(syncs) // 2] if syncs else None,
            "sync_left_behind": sorted({p for e in syncs for p in e["left_behind"]}),
            "saw_retirement_at": retired_step,
            "sync_reloads_waiting_for_retired": waited_for_retired,
        })
    results[mode] = rows
    print(f"== {mode} (train.steps {steps}, reload_every {every})")
    print(f"{'w':>2} {'exit':>4} {'steps':>11} {'joined':>6} {'1st teacher':>11} {'delay':>5} {'peers':>9} "
          f"{'acc':>7} {'retired':>7} {'sync max/med ms':>15} {'left behind':>11} {'waits for retired':>17}")
    for r in rows:
        sync = (f"{r['sync_waited_ms_max']:.0f}/{r['sync_waited_ms_median']:.0f}" if r["sync_reloads"] else "-")
        acc = f"{100 * r['accuracy']:.2f}%" if r["accuracy"] is not None else "-"
        print(f"{r['worker']:>2} {r['exit']:>4} {str(r['first_step'])+'-'+str(r['last_step']):>11} "
              f"{str(r['joined_at']):>6} {str(r['first_teacher_step']):>11} {str(r['teacher_delay']):>5} "
              f"{','.join(map(str, r['teacher_peers'])):>9} {acc:>7} {str(r['retired']):>7} {sync:>15} "
              f"{','.join(map(str, r['sync_left_behind'])) or '-':>11} {len(r['sync_reloads_waiting_for_retired']):>17}")
(out / "results.json").write_text(json.dumps(results, indent=1))
PY
