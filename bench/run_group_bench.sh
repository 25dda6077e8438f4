#!/usr/bin/env bash
# Worker groups on the CPU (issue 12's target): the gradient all-reduce's cost, and a group
# of R one-thread ranks against one R-thread process on the same total batch.
#   bench/run_group_bench.sh [CONFIG...]   (default: configs/fmnist_mlp.yaml configs/fmnist_resnet8.yaml)
# Part 1: bench_allreduce under `mpirun -np R` on each config's gradient size (the floats
# of its parameters, from the model summary in train.log). Part 2: per config, round by
# round (REPEATS rounds, alternating): `mpirun -np R codistill-train` with run.threads 1 and
# data.batch_size B (per rank), and one codistill-train with run.threads R and batch R*B.
# Throughput is rank 0's / the process's `done.train_examples_per_s` (the group's examples).
# Writes RESULTS_DIR/group_cpu.json and .txt (raw output).
# Environment: RANKS (2), REPEATS (3), STEPS (MLP 3000, others 300), BUILD_DIR (build/),
#   SKIP_BUILD=1, RESULTS_DIR (bench/results), GROUP_ARGS (more arguments for the group's
#   ranks, e.g. "--set group.bucket_mb=0.25": buckets small enough to start during backward).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="$(realpath -m "${BUILD_DIR:-$root/build}")"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  BUILD_DIR="$build" "$root/scripts/build.sh" >/dev/null
fi
train="$build/trainer/codistill-train"
allreduce="$build/bench/bench_allreduce"
for p in "$train" "$allreduce"; do [ -x "$p" ] || { echo "run_group_bench.sh: no $p" >&2; exit 1; }; done
ranks="${RANKS:-2}"
repeats="${REPEATS:-3}"
results="${RESULTS_DIR:-$root/bench/results}"
configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(configs/fmnist_mlp.yaml configs/fmnist_resnet8.yaml)
mpirun=(mpirun -np "$ranks" --oversubscribe)
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$results"
raw="$results/group_cpu.txt"
: >"$raw"
log() { tee -a "$raw"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
eps() { grep '"done"' "$1/worker-000/metrics.jsonl" | /usr/bin/python3 -c \
  'import json,sys; print(json.loads(sys.stdin.read())["train_examples_per_s"])'; }
common=(--set train.eval_every=0 --set checkpoint.every=0 --set data.test_limit=500)
read -ra group_args <<<"${GROUP_ARGS:-}"
echo "worker groups: $ranks ranks x 1 thread vs 1 process x $ranks threads; $repeats rounds; $train;" \
  "group args: ${GROUP_ARGS:-none}" | log

runs="$work/runs.tsv"
: >"$runs"
for cfg in "${configs[@]}"; do
  name="$(basename "$cfg" .yaml)"
  steps="${STEPS:-}"
  [ -z "$steps" ] && { case "$name" in *mlp*) steps=3000 ;; *) steps=300 ;; esac; }
  batch="$(/usr/bin/python3 -c 'import sys,yaml; print(yaml.safe_load(open(sys.argv[1]))["data"]["batch_size"])' "$cfg")"
  # The gradient's size: the parameter count of the model summary.
  "$train" --config "$cfg" --run-dir "$work/$name-probe" --set train.steps=1 "${common[@]}" >/dev/null 2>&1
  floats="$(sed -n 's/.*model [a-z0-9_]* (\([0-9]*\) parameters.*/\1/p' "$work/$name-probe/worker-000/train.log" | head -n1)"
  [ -n "$floats" ] || { echo "run_group_bench.sh: no parameter count in $name's train.log" >&2; exit 1; }
  echo "== $name: all-reduce of $floats floats ($((floats * 4)) bytes) over $ranks ranks (load $(loadavg))" | log
  "${mpirun[@]}" "$allreduce" "$floats" --calls 200 2>&1 | log
  for ((r = 1; r <= repeats; r++)); do
    for c in group process; do
      dir="$work/$r/$name-$c"
      mkdir -p "$work/$r"
      lb="$(loadavg)"
      if [ "$c" = group ]; then
        "${mpirun[@]}" "$train" --config "$cfg" --run-dir "$dir" --set run.threads=1 \
          --set "data.batch_size=$batch" --set "train.steps=$steps" "${common[@]}" "${group_args[@]}" >"$dir.out" 2>&1 ||
          { cat "$dir.out" >&2; exit 1; }
      else
        "$train" --config "$cfg" --run-dir "$dir" --set "run.threads=$ranks" \
          --set "data.batch_size=$((batch * ranks))" --set "train.steps=$steps" "${common[@]}" >"$dir.out" 2>&1 ||
          { cat "$dir.out" >&2; exit 1; }
      fi
      la="$(loadavg)"
      e="$(eps "$dir")"
      echo "round $r $name $c: $e ex/s ($steps steps of $((batch * ranks)); load $lb -> $la)" | log
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$cfg" "$c" "$e" "$lb" "$la" "$floats" "$batch" >>"$runs"
    done
  done
done

/usr/bin/python3 - "$runs" "$raw" "$results/group_cpu.json" "$ranks" "$repeats" "$build" <<'PY'
import datetime, json, os, statistics, subprocess, sys
runs_path, raw, json_path, ranks, repeats, build = sys.argv[1:7]
rows = [dict(zip(("round", "config", "contender", "eps", "load_before", "load_after", "floats", "batch"),
                 l.rstrip("\n").split("\t"))) for l in open(runs_path)]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
allreduce = [l.split() for l in open(raw) if l.startswith("allreduce ")]
results, lines = [], []
for cfg in dict.fromkeys(r["config"] for r in rows):
    per = {c: [float(r["eps"]) for r in rows if r["config"] == cfg and r["contender"] == c] for c in ("group", "process")}
    s = {c: {"best": max(v), "median": statistics.median(v), "runs": v} for c, v in per.items()}
    ratio = {"best": s["group"]["best"] / s["process"]["best"], "median": s["group"]["median"] / s["process"]["median"]}
    floats = int(next(r["floats"] for r in rows if r["config"] == cfg))
    ar = next((dict(zip(a[2::2], a[3::2]), kind=a[1]) for a in allreduce if int(a[a.index("floats") + 1]) == floats), None)
    results.append({"config": cfg, "gradient_floats": floats, "allreduce": ar, "examples_per_s": s,
                    "group_over_process": ratio,
                    "loads": [(r["load_before"], r["load_after"]) for r in rows if r["config"] == cfg]})
    name = os.path.basename(cfg)[:-5]
    lines.append(f"{name:<16} group of {ranks} x 1 thread: best {s['group']['best']:.0f} median {s['group']['median']:.0f} ex/s; "
                 f"1 process x {ranks} threads: best {s['process']['best']:.0f} median {s['process']['median']:.0f}; "
                 f"group/process best {ratio['best']:.2f} median {ratio['median']:.2f}")
    if ar:
        batch = int(next(r["batch"] for r in rows if r["config"] == cfg))
        step_ms = 1e3 * batch * int(ranks) / s["group"]["median"]
        lines.append(f"{name:<16} all-reduce {floats * 4} bytes: median {float(ar['median_ms']):.3f} ms "
                     f"(best {float(ar['best_ms']):.3f}); group step at its median rate {step_ms:.2f} ms")
lines.append(f"({cpu}, {ranks} ranks, {repeats} rounds, commit {commit})")
doc = {"benchmark": "group_cpu", "device": cpu, "ranks": int(ranks), "repeats": int(repeats),
       "date": datetime.datetime.now().isoformat(timespec="seconds"), "commit": commit, "build": build,
       "results": results}
json.dump(doc, open(json_path, "w"), indent=2)
print("\n".join(lines))
open(raw, "a").write("== summary\n" + "\n".join(lines) + "\n")
PY
