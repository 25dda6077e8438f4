#!/usr/bin/env bash
# docs/results.md, the paper's headline experiment at this machine's scale: at a fixed
# per-rank batch B, synchronous SGD over R = 1, 2, 4, 8 ranks (total batch R x B) against 2
# codistilling groups of R/2 ranks each (each group on its own half of the data); the
# steps each needs to reach a target test loss, over several seeds.
#   scripts/experiments/sync_vs_codistill.sh CONFIG OUT "SEEDS" [train args...]
# Environment: RANK_COUNTS ("1 2 4 8"), BATCH (per-rank batch, 32), LR (the learning rate of one
# rank at batch BATCH, 0.0125), TARGET (test losses, "0.40 0.37 0.35"), STEPS (budget, 3000), EVAL (every,
# 100), GROUP_MODE (how a group of R ranks runs: "process" (default), one process with batch
# R x B, which takes the same steps as R ranks with batch B (tests/trainer/train/
# test_group_process.cpp: within 1.7e-7 after 40 steps), or "mpirun", R real ranks, oversubscribed
# here, with group.sync_batchnorm so that a model with BatchNorm is the same experiment), JOBS
# (runs at once, 1), SLACK (unset: every run gets STEPS steps; a number k: a group of R ranks
# gets min(STEPS, ceil(k x STEPS / R)) steps, at least 5 evaluations: under the linear
# scaling rule a perfectly scaling run needs STEPS / R steps, so k times that leaves room for
# a run that scales worse, and the large-R runs do not spend R times the work of R = 1 going
# past their target).
# Learning rate: the linear scaling rule (Goyal et al. 2017): R x LR for a total batch of
# R x B, after the config's warmup; constant schedule, so that "steps to the target" does not
# depend on the budget. Codistilling groups use the rate of their own total batch (R/2 x B).
# Finished runs are kept and skipped (a run of another STEPS too: steps to a target do not
# depend on the budget under a constant rate, once reached). Writes OUT/results.json and
# prints a table: steps to each target, and the best test loss and its step (with a
# constant rate the test loss ends rising again: the best, not the last, is the model).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ $# -ge 3 ] || { echo "usage: $0 CONFIG OUT \"SEEDS\" [train args...]" >&2; exit 2; }
config="$1" out="$2" seeds="$3"; shift 3
ranks_list="${RANK_COUNTS:-1 2 4 8}" batch="${BATCH:-32}" lr="${LR:-0.0125}" target="${TARGET:-0.40 0.37 0.35}"
steps="${STEPS:-3000}" eval_every="${EVAL:-100}" groups="${GROUP_MODE:-process}" jobs_max="${JOBS:-1}"
case "$groups" in process|mpirun) ;; *) echo "GROUP_MODE must be process or mpirun, got '$groups'" >&2; exit 2 ;; esac
mkdir -p "$out"
common=(--set train.steps="$steps" --set train.eval_every="$eval_every" --set checkpoint.every="$steps"
        --set optimizer.schedule.kind=constant --set run.threads=1 --set data.shard=disjoint)

# one RUN WORKERS RANKS: a run of WORKERS workers, each a group of RANKS ranks at batch B.
one() {
  local name="$1" workers="$2" ranks="$3" seed="$4"; shift 4
  local rate launch=() per_process="$batch" budget="$steps"
  rate="$(python3 -c "print($lr * $ranks)")"
  [ -n "${SLACK:-}" ] && budget="$(python3 -c "import math; print(max(5 * $eval_every, min($steps, math.ceil($SLACK * $steps / $ranks))))")"
  # R real ranks normalize BatchNorm with the statistics of all their rows, as one process
  # with the group's batch does (without it they would not be the same experiment).
  if [ "$groups" = mpirun ] && [ "$ranks" -gt 1 ]; then launch=(--ranks "$ranks"); else per_process=$((batch * ranks)); fi
  [ ${#launch[@]} -gt 0 ] && set -- "$@" --set group.sync_batchnorm=true
  [ -f "$out/$name/done" ] && return 0
  rm -rf "${out:?}/$name"
  "$root/scripts/launch_local.sh" "${launch[@]}" "$config" "$workers" --run-dir "$out/$name" \
    --set run.seed="$seed" --set data.batch_size="$per_process" --set optimizer.lr="$rate" \
    --set codistill.enabled="$([ "$workers" -gt 1 ] && echo true || echo false)" "${common[@]}" \
    --set train.steps="$budget" --set checkpoint.every="$budget" "$@" \
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
# A run that fails (e.g. diverges at a large rate) is summarized with what it logged, and
# the script exits 1 after the table.
[ "$failed" = 0 ] || echo "sync_vs_codistill.sh: a run failed (its log in $out; summarized up to where it stopped)" >&2

# eval_curves.py (beside this script): the curves, steps to a target, the spread.
PYTHONPATH="$root/scripts/experiments${PYTHONPATH:+:$PYTHONPATH}" /usr/bin/python3 - "$out" "$seeds" "$ranks_list" "$target" "$batch" <<'PY'
import glob, json, statistics as st, sys
from eval_curves import read_curve, sd, steps_to
out, seeds, ranks, targets, batch = (sys.argv[1], sys.argv[2].split(), [int(r) for r in sys.argv[3].split()],
                                     [float(t) for t in sys.argv[4].split()], int(sys.argv[5]))

rows = {}
for kind in ("sync", "codistill"):
    for r in ranks:
        if kind == "codistill" and r < 2:
            continue
        curves, diverged, total = [], 0, 0
        for s in seeds:
            for m in sorted(glob.glob(f"{out}/{kind}-r{r}-s{s}/worker-*/metrics.jsonl")):
                total += 1
                c = read_curve(m)
                # A run that stopped on a non-finite loss (codistill-train's divergence error).
                log = m.replace("metrics.jsonl", "stdout.txt")
                if "training diverged" in open(log, errors="replace").read():
                    diverged += 1
                if c:
                    curves.append(c)
        if not curves:
            rows[f"{kind}-r{r}"] = {"ranks": r, "runs": total, "diverged": diverged}
            continue
        reach = {t: [steps_to(c, t) for c in curves] for t in targets}
        rows[f"{kind}-r{r}"] = {"ranks": r, "batch_per_group": r * batch if kind == "sync" else r // 2 * batch,
                                "runs": total, "diverged": diverged,
                                "steps_to_target": {str(t): v for t, v in reach.items()},
                                "best_loss": [min(l for _, l in c) for c in curves],
                                "best_step": [min(c, key=lambda p: p[1])[0] for c in curves],
                                "final_loss": [c[-1][1] for c in curves]}
print(f"per-rank batch {batch}; test loss; mean over seeds (x workers); steps to a target interpolated between "
      f"evaluations, (k/n) when only k of n runs reached it")
head = "".join(f"{'to ' + str(t):>16}" for t in targets)
print(f"{'setting':<14} {'batch/group':>11}{head} {'best loss':>17} {'at step':>8}")
for k, v in rows.items():
    if "best_loss" not in v:
        print(f"{k:<14} every run diverged ({v['diverged']})")
        continue
    cells = ""
    for t in targets:
        ok = [x for x in v["steps_to_target"][str(t)] if x is not None]
        cell = f"{st.mean(ok):.0f}" if ok else "never"
        if len(ok) < v["runs"]:
            cell += f" ({len(ok)}/{v['runs']})"
        cells += f"{cell:>16}"
    print(f"{k:<14} {v['batch_per_group']:>11}{cells} {st.mean(v['best_loss']):>8.4f} ± {sd(v['best_loss']):.4f} "
          f"{st.mean(v['best_step']):>8.0f}" + (f"   ({v['diverged']} diverged)" if v["diverged"] else ""))
json.dump({"targets": targets, "batch_per_rank": batch, "rows": rows}, open(f"{out}/results.json", "w"), indent=1)
PY
exit "$failed"
