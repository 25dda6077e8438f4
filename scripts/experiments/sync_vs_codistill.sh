#!/usr/bin/env bash
# docs/results.md, the paper's headline experiment at this machine's scale: at a fixed
# per-rank batch B, synchronous SGD over R = 1, 2, 4, 8 ranks (total batch R x B) against 2
# codistilling groups of R/2 ranks each (each group on its own half of the data); the
# steps each needs to reach a target test loss, over several seeds.
#   scripts/experiments/sync_vs_codistill.sh CONFIG OUT "SEEDS" [train args...]
# Environment: RANK_COUNTS ("1 2 4 8"), BATCH (per-rank batch, 32), LR (the learning rate of one
# rank at batch BATCH, 0.0125), TARGET (test loss, 0.40), STEPS (budget, 3000), EVAL (every,
# 100), GROUP_MODE (how a group of R ranks runs: "process" (default), one process with batch
# R x B, which takes the same steps as R ranks with batch B (tests/trainer/
# test_group_process.cpp: within 1.7e-7 after 40 steps), or "mpirun", R real ranks, oversubscribed
# here), JOBS (runs at once, 1).
# Learning rate: the linear scaling rule (Goyal et al. 2017): R x LR for a total batch of
# R x B, after the config's warmup; constant schedule, so that "steps to the target" does not
# depend on the budget. Codistilling groups use the rate of their own total batch (R/2 x B).
# Finished runs are kept and skipped. Writes OUT/results.json and prints a table.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ $# -ge 3 ] || { echo "usage: $0 CONFIG OUT \"SEEDS\" [train args...]" >&2; exit 2; }
config="$1" out="$2" seeds="$3"; shift 3
ranks_list="${RANK_COUNTS:-1 2 4 8}" batch="${BATCH:-32}" lr="${LR:-0.0125}" target="${TARGET:-0.40}"
steps="${STEPS:-3000}" eval_every="${EVAL:-100}" groups="${GROUP_MODE:-process}" jobs_max="${JOBS:-1}"
case "$groups" in process|mpirun) ;; *) echo "GROUP_MODE must be process or mpirun, got '$groups'" >&2; exit 2 ;; esac
mkdir -p "$out"
common=(--set train.steps="$steps" --set train.eval_every="$eval_every" --set checkpoint.every="$steps"
        --set optimizer.schedule.kind=constant --set run.threads=1 --set data.shard=disjoint)

# one RUN WORKERS RANKS: a run of WORKERS workers, each a group of RANKS ranks at batch B.
one() {
  local name="$1" workers="$2" ranks="$3" seed="$4"; shift 4
  local rate launch=() per_process="$batch"
  rate="$(python3 -c "print($lr * $ranks)")"
  if [ "$groups" = mpirun ] && [ "$ranks" -gt 1 ]; then launch=(--ranks "$ranks"); else per_process=$((batch * ranks)); fi
  [ -f "$out/$name/done" ] && return 0
  rm -rf "${out:?}/$name"
  "$root/scripts/launch_local.sh" "${launch[@]}" "$config" "$workers" --run-dir "$out/$name" \
    --set run.seed="$seed" --set data.batch_size="$per_process" --set optimizer.lr="$rate" \
    --set codistill.enabled="$([ "$workers" -gt 1 ] && echo true || echo false)" "${common[@]}" "$@" \
    >"$out/$name.log" || return 1
  touch "$out/$name/done"
}

runs=()
for seed in $seeds; do
  for r in $ranks_list; do
    runs+=("sync-r$r-s$seed 1 $r $seed")
    [ "$r" -ge 2 ] && runs+=("codistill-r$r-s$seed 2 $((r / 2)) $seed")
  done
done
case "$jobs_max" in ''|*[!0-9]*|0) echo "JOBS must be a positive integer, got '$jobs_max'" >&2; exit 2 ;; esac
pids=()
for spec in "${runs[@]}"; do
  # shellcheck disable=SC2086
  one $spec "$@" &
  pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=1; done
[ "$failed" = 0 ] || { echo "sync_vs_codistill.sh: a run failed (logs in $out)" >&2; exit 1; }

/usr/bin/python3 - "$out" "$seeds" "$ranks_list" "$target" "$batch" <<'PY'
import glob, json, statistics as st, sys
out, seeds, ranks, target, batch = sys.argv[1], sys.argv[2].split(), [int(r) for r in sys.argv[3].split()], float(sys.argv[4]), int(sys.argv[5])

def curve(path):
    return [(e["step"], e["loss"]) for e in map(json.loads, open(path)) if e["event"] == "eval"]

def steps_to(c):
    prev = None
    for step, loss in c:
        if loss <= target:
            if prev is None or prev[1] == loss:
                return float(step)
            return prev[0] + (step - prev[0]) * (prev[1] - target) / (prev[1] - loss)
        prev = (step, loss)
    return None

rows = {}
for kind in ("sync", "codistill"):
    for r in ranks:
        if kind == "codistill" and r < 2:
            continue
        reach, final, missed = [], [], 0
        for s in seeds:
            for m in sorted(glob.glob(f"{out}/{kind}-r{r}-s{s}/worker-*/metrics.jsonl")):
                c = curve(m)
                final.append(c[-1][1])
                t = steps_to(c)
                if t is None:
                    missed += 1
                else:
                    reach.append(t)
        rows[f"{kind}-r{r}"] = {"ranks": r, "total_batch": r * batch if kind == "sync" else r // 2 * batch,
                                "steps_to_target": reach, "missed": missed, "final_loss": final}
print(f"target test loss {target}; per-rank batch {batch}; mean ± std over seeds (x workers)")
print(f"{'setting':<14} {'batch/group':>11} {'steps to target':>20} {'final loss':>18}")
for k, v in rows.items():
    reach = v["steps_to_target"]
    s = f"{st.mean(reach):.0f} ± {st.stdev(reach) if len(reach) > 1 else 0:.0f}" if reach else "never"
    if v["missed"]:
        s += f" ({v['missed']} missed)"
    print(f"{k:<14} {v['total_batch']:>11} {s:>20} {st.mean(v['final_loss']):>9.4f} ± "
          f"{st.stdev(v['final_loss']) if len(v['final_loss']) > 1 else 0:.4f}")
json.dump({"target": target, "batch_per_rank": batch, "rows": rows}, open(f"{out}/results.json", "w"), indent=1)
PY
