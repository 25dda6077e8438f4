#!/usr/bin/env bash
# Ensemble-size sweep (DESIGN.md section 3):
#   scripts/sweep_ensemble.sh CONFIG "1 2 4" [--out DIR] [codistill-train args...]
# For each size N: one launch of N workers (scripts/launch_local.sh) into DIR/n<N>, with
# codistillation on when N > 1 and off for N = 1 (the single-model baseline; a train arg
# --set codistill.enabled=... given here overrides that), and every worker forced to
# run.threads = max(1, nproc / N) so that the N workers share this machine's cores. Then:
#   DIR/summary.csv   one row per N: n, threads, acc_mean, acc_std (population: 0 for
#                     N = 1), acc_min, acc_max (the workers' final test accuracy, from
#                     their last `done` event), loss_mean (final test loss), ensemble_acc
#                     (the N final checkpoints together, codistill-inspect eval; for N = 1
#                     the model's own), churn_mean (mean pairwise codistill-inspect churn
#                     between them; empty for N = 1), wall_s (the launch, start-up
#                     included), status (ok | failed | interrupted | not run)
#   DIR/summary.png   accuracy against steps per N, and final accuracy and churn against N
#                     (scripts/plot_sweep.py; gnuplot)
#   DIR/n<N>/         the run directory of each launch, plus launch.log, eval.json and
#                     churn-<i>-<j>.json (the raw codistill-inspect output)
# DIR defaults to runs/sweep-<date>-<time> in the repository. Running the sweep again with
# the same --out resumes: each worker continues from its newest checkpoint (a finished
# one only evaluates again), so the wall_s column then counts only the new invocation.
# Exit codes: 0 all launches succeeded; 2 usage error (bad size list, missing config,
# arguments the sweep sets itself); 1 a launch failed (the message names the sizes; the
# summary still has a row for it, status "failed") or the plot failed; 130 interrupted.
# Environment: BUILD_DIR (default: <repo>/build), SWEEP_CORES (default: nproc),
# OMP_WAIT_POLICY (default here: passive; OpenMP threads that spin-wait lose their cores
# to any other load on the machine, which made 2-thread workers 5-40x slower on a busy
# 2-core machine; export OMP_WAIT_POLICY=active to measure without it).
set -uo pipefail
usage() {
  echo "usage: scripts/sweep_ensemble.sh CONFIG \"1 2 4\" [--out DIR] [codistill-train args...]" >&2
  exit 2
}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -ge 2 ] || usage
config="$1" sizes_arg="$2"
shift 2

[ -f "$config" ] || { echo "sweep_ensemble.sh: no config file '$config'" >&2; exit 2; }
sizes=()
read -r -a size_words <<<"$sizes_arg"
for s in "${size_words[@]}"; do
  case "$s" in ''|*[!0-9]*|???????*) echo "sweep_ensemble.sh: bad ensemble size '$s' in '$sizes_arg' (want positive integers, e.g. \"1 2 4\")" >&2; exit 2 ;; esac
  s=$((10#$s))
  [ "$s" -ge 1 ] || { echo "sweep_ensemble.sh: ensemble size must be >= 1, got '$s'" >&2; exit 2; }
  for t in "${sizes[@]}"; do
    [ "$t" -ne "$s" ] || { echo "sweep_ensemble.sh: ensemble size $s given twice in '$sizes_arg'" >&2; exit 2; }
  done
  sizes+=("$s")
done
[ ${#sizes[@]} -ge 1 ] || { echo "sweep_ensemble.sh: empty list of ensemble sizes" >&2; exit 2; }

out=""
train_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || usage; out="$2"; shift 2 ;;
    --out=*) out="${1#--out=}"; shift ;;
    --run-dir|--run-dir=*|--worker|--worker=*|--workers|--workers=*)
      echo "sweep_ensemble.sh: $1 is set by the sweep itself (use --out DIR)" >&2; exit 2 ;;
    run.dir=*|run.worker=*|run.workers=*)
      echo "sweep_ensemble.sh: --set $1 is set by the sweep itself (use --out DIR)" >&2; exit 2 ;;
    *) train_args+=("$1"); shift ;;
  esac
done
[ -n "$out" ] || out="$root/runs/sweep-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out" || { echo "sweep_ensemble.sh: cannot create '$out'" >&2; exit 2; }
out="$(cd "$out" && pwd -P)"

build="${BUILD_DIR:-$root/build}"
inspect="$build/trainer/codistill-inspect"
[ -x "$build/trainer/codistill-train" ] || { echo "sweep_ensemble.sh: $build/trainer/codistill-train not built (run scripts/build.sh)" >&2; exit 2; }
[ -x "$inspect" ] || { echo "sweep_ensemble.sh: $inspect not built (run scripts/build.sh)" >&2; exit 2; }
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
python=/usr/bin/python3
[ -x "$python" ] || python=python3
cores="${SWEEP_CORES:-$(nproc)}"
case "$cores" in ''|*[!0-9]*|0) echo "sweep_ensemble.sh: SWEEP_CORES must be a positive integer, got '$cores'" >&2; exit 2 ;; esac

# Ctrl-C / SIGTERM: stop the running launch (launch_local.sh forwards it to its workers,
# which publish a checkpoint and stop), start no further size, summarize what is there.
launch_pid="" interrupted=0
on_signal() {
  interrupted=1
  [ -n "$launch_pid" ] && kill -TERM "$launch_pid" 2>/dev/null
}
trap on_signal INT TERM

echo "sweep_ensemble.sh: sizes ${sizes[*]} of $config into $out ($cores cores)"
failed=() status=()
for n in "${sizes[@]}"; do
  if [ "$interrupted" -ne 0 ]; then status+=("not run"); continue; fi
  threads=$((cores / n)); [ "$threads" -ge 1 ] || threads=1
  enabled=false; [ "$n" -gt 1 ] && enabled=true
  run_dir="$out/n$n"
  mkdir -p "$run_dir"
  echo "sweep_ensemble.sh: n=$n: $n worker(s), $threads thread(s) each, codistill.enabled=$enabled -> $run_dir"
  t0="$(date +%s.%N)"
  "$root/scripts/launch_local.sh" "$config" "$n" --run-dir "$run_dir" --set "codistill.enabled=$enabled" \
    "${train_args[@]}" --set "run.threads=$threads" > >(trap '' INT TERM; exec tee "$run_dir/launch.log") 2>&1 &
  launch_pid=$!
  wait "$launch_pid"; rc=$?
  while kill -0 "$launch_pid" 2>/dev/null; do wait "$launch_pid"; rc=$?; done
  launch_pid=""
  t1="$(date +%s.%N)"
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }' >"$run_dir/wall_s"
  rm -f "$run_dir/eval.json" "$run_dir"/churn-*.json
  if [ "$rc" -ne 0 ]; then
    echo "sweep_ensemble.sh: n=$n: launch failed (exit $rc); see $run_dir/launch.log and $run_dir/worker-*/stdout.txt" >&2
    failed+=("$n"); status+=("failed"); continue
  fi
  if [ "$interrupted" -ne 0 ]; then status+=("interrupted"); continue; fi
  # The final (newest) checkpoint of each worker: their ensemble's accuracy, pairwise churn.
  finals=()
  for ((w = 0; w < n; w++)); do
    f="$(ls "$run_dir/$(printf 'worker-%03d' "$w")"/ckpt-*.h5 2>/dev/null | sort | tail -n 1)"
    [ -n "$f" ] && finals+=("$f")
  done
  if [ ${#finals[@]} -ne "$n" ]; then
    echo "sweep_ensemble.sh: n=$n: only ${#finals[@]} of $n workers left a checkpoint" >&2
    failed+=("$n"); status+=("failed"); continue
  fi
  ok=1
  "$inspect" eval "${finals[@]}" --threads "$cores" --json >"$run_dir/eval.json" || ok=0
  for ((i = 0; i < n; i++)); do
    for ((j = i + 1; j < n; j++)); do
      "$inspect" churn "${finals[$i]}" "${finals[$j]}" --threads "$cores" --json >"$run_dir/churn-$i-$j.json" || ok=0
    done
  done
  if [ "$ok" -ne 1 ]; then
    echo "sweep_ensemble.sh: n=$n: codistill-inspect failed on the final checkpoints" >&2
    failed+=("$n"); status+=("failed"); continue
  fi
  status+=("ok")
done

# summary.csv from the done events of metrics.jsonl and the codistill-inspect JSON.
"$python" - "$out" "$cores" "${sizes[*]}" "${status[@]}" <<'EOF'
import csv, glob, json, math, os, sys
out, cores, sizes, statuses = sys.argv[1], int(sys.argv[2]), [int(s) for s in sys.argv[3].split()], sys.argv[4:]

def last_done(metrics):
    done = None
    try:
        with open(metrics) as f:
            for line in f:
                line = line.strip()
                if line:
                    e = json.loads(line)
                    if e.get("event") == "done":
                        done = e
    except OSError:
        pass
    return done

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

fmt = lambda x: "" if x is None else ("%.8g" % x)
cols = ["n", "threads", "acc_mean", "acc_std", "acc_min", "acc_max", "loss_mean", "ensemble_acc",
        "churn_mean", "wall_s", "status"]
with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
    wr = csv.writer(f, lineterminator="\n")
    wr.writerow(cols)
    for n, status in zip(sizes, statuses):
        d = os.path.join(out, "n%d" % n)
        dones = [last_done(os.path.join(d, "worker-%03d" % w, "metrics.jsonl")) for w in range(n)]
        accs = [e["accuracy"] for e in dones if e and e.get("accuracy") is not None]
        losses = [e["loss"] for e in dones if e and e.get("loss") is not None]
        if status == "ok" and any(e is None or e.get("interrupted") for e in dones):
            status = "interrupted"
        mean = sum(accs) / len(accs) if accs else None
        std = math.sqrt(sum((a - mean) ** 2 for a in accs) / len(accs)) if accs else None
        ens = None
        ev = load(os.path.join(d, "eval.json"))
        if ev:
            if ev.get("ensemble"):
                ens = ev["ensemble"]["accuracy"]
            elif len(ev.get("results", [])) == 1:  # one model: its own accuracy
                ens = ev["results"][0]["accuracy"]
        churns = [c["churn"] for c in (load(p) for p in glob.glob(os.path.join(d, "churn-*.json"))) if c]
        churn = sum(churns) / len(churns) if churns else None
        wall = None
        try:
            with open(os.path.join(d, "wall_s")) as w:
                wall = float(w.read())
        except (OSError, ValueError):
            pass
        wr.writerow([n, max(1, cores // n), fmt(mean), fmt(std), fmt(min(accs) if accs else None),
                     fmt(max(accs) if accs else None), fmt(sum(losses) / len(losses) if losses else None),
                     fmt(ens), fmt(churn), "" if wall is None else "%.3f" % wall, status])
EOF
[ $? -eq 0 ] || { echo "sweep_ensemble.sh: could not write $out/summary.csv" >&2; exit 1; }
echo
column -s, -t <"$out/summary.csv" 2>/dev/null || cat "$out/summary.csv"
echo

plot_ok=1
"$python" "$root/scripts/plot_sweep.py" "$out" || plot_ok=0
[ "$plot_ok" -eq 1 ] && echo "sweep_ensemble.sh: wrote $out/summary.csv and $out/summary.png"

if [ "$interrupted" -ne 0 ]; then
  echo "sweep_ensemble.sh: interrupted; run again with --out $out to resume" >&2
  exit 130
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "sweep_ensemble.sh: launch failed for ensemble size(s): ${failed[*]}" >&2
  exit 1
fi
[ "$plot_ok" -eq 1 ] || { echo "sweep_ensemble.sh: the plot failed (summary.csv is written)" >&2; exit 1; }
exit 0
