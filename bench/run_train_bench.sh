#!/usr/bin/env bash
# Training benchmark, side by side in one run: codistill-train, the PyTorch reference
# (bench/torch_train.py, Debian's torch) and the JAX/XLA reference (bench/jax_train.py, PyPI
# jax[cpu] in .venv-bench/) train the same config (model, hyper-parameters, batch, steps,
# threads) on Fashion-MNIST on the CPU.
#   bench/run_train_bench.sh [CONFIG...]     (default: configs/fmnist_mlp.yaml configs/fmnist_cnn.yaml;
#                                             the references know model kinds mlp, cnn and resnet,
#                                             e.g. configs/fmnist_resnet8.yaml)
# The machine is shared and noisy, so the contenders alternate: round r runs the sgemm
# ceiling (bench_sgemm) once, then for each config codistill, [codistill-before,] pytorch,
# jax, one after the other, the order rotated by one each round (a binary's place in the
# round moved its time by a few percent in the loss benchmark); REPEATS rounds, best a
# multiple of the number of contenders, so that each takes every place equally often. The
# load average (/proc/loadavg) is recorded before and after every run. The table gives, per config and contender, the best and the
# median training throughput (examples/s over the step loop, evaluation excluded; JAX also
# leaves out its compile and first steps, see jax_train.py) and the ratios codistill/jax,
# codistill/pytorch (and codistill/codistill-before) best vs best and median vs median;
# for fmnist_mlp also its GFLOP/s (examples/s x 1.21 MFLOP, the MLP's forward + backward
# GEMM work per example) as a share of the measured sgemm peak.
# With two or more threads, bench_core_link measures before and after every run how far
# apart the process's first two CPUs are (a cache line's round trip between them): this
# host's hypervisor moves its two vCPUs between cores that share a cache (round trip 59-110
# ns) and cores that do not (260-421 ns) every few seconds; a two-thread training step has
# slow phases the sgemm ceiling does not, whose cause is open (docs/results.md). Each run
# is labelled near (both measurements under 150 ns), far (both over) or mixed, and the
# summary gives each contender's median per placement; the placement can change within a
# run, so the label is a hint, not a measurement of the run.
# Writes RESULTS_DIR/train_cpu.json and RESULTS_DIR/train_cpu.txt (raw output).
# Environment:
#   THREADS (2)          threads of every contender
#   STEPS                override every config's train.steps (all contenders)
#   REPEATS (3)          rounds
#   BUILD_DIR (build/)   the codistill build measured (scripts/build.sh builds it there)
#   SKIP_BUILD=1         use BUILD_DIR as it is, do not run scripts/build.sh
#   BEFORE_BUILD=DIR     a second codistill build (e.g. of an older commit, built by the
#                        caller) run as the extra contender "codistill-before", with the
#                        ratio codistill/codistill-before (after / before)
#   SGEMM_BIN            the sgemm program (default BUILD_DIR/bench/bench_sgemm; when it is
#                        missing the sgemm columns are left out, with a warning)
#   LINK_BIN             the core-link probe (default BUILD_DIR/bench/bench_core_link; when
#                        it is missing, or THREADS is 1, runs carry no placement)
#   JAX_PYTHON           interpreter with jax (default .venv-bench/bin/python)
#   RESULTS_DIR          where the results go (default bench/results; a smoke test can
#                        point it elsewhere so as not to overwrite the committed numbers)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
"$root/scripts/setup.sh" --bench
build="$(realpath -m "${BUILD_DIR:-$root/build}")"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  BUILD_DIR="$build" "$root/scripts/build.sh" >/dev/null
fi
threads="${THREADS:-2}"
repeats="${REPEATS:-3}"
jax_python="${JAX_PYTHON:-$root/.venv-bench/bin/python}"
results="${RESULTS_DIR:-$root/bench/results}"
sgemm="${SGEMM_BIN:-$build/bench/bench_sgemm}"
link_bin="${LINK_BIN:-$build/bench/bench_core_link}"
configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(configs/fmnist_mlp.yaml configs/fmnist_cnn.yaml)

. "$root/bench/contenders.sh"
codistill_contenders run_train_bench.sh trainer/codistill-train
if [ ! -x "$link_bin" ] || [ "$threads" -lt 2 ]; then
  [ "$threads" -ge 2 ] && echo "run_train_bench.sh: warning: no $link_bin: runs carry no core placement" >&2
  link_bin=""
fi
if [ ! -x "$sgemm" ]; then
  echo "run_train_bench.sh: warning: no $sgemm: the sgemm peak is left out" >&2
  sgemm=""
fi

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
mkdir -p "$results"
raw="$results/train_cpu.txt"
: >"$raw"
log() { tee -a "$raw"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
# core_link NAME: the probe's line into the raw log, its JSON into a file named for NAME;
# prints that file's path ("-" without the probe).
core_link() {
  if [ -z "$link_bin" ]; then echo -; return; fi
  local f="$out/link.$1.json"
  # $(...) does not inherit set -e: a failed probe leaves this run without a placement.
  if ! "$link_bin" --json "$f" 2>&1 | log >&2; then
    echo "run_train_bench.sh: warning: $link_bin failed: no placement for this run" | log >&2
    echo -
    return
  fi
  echo "$f"
}
steps_set=() steps_arg=()
if [ -n "${STEPS:-}" ]; then
  steps_set=(--set "train.steps=$STEPS")
  steps_arg=(--steps "$STEPS")
fi
echo "contenders: ${contenders[*]}; $repeats rounds, $threads threads; build $build${before:+, before $before}" | log
# One line per run for the report: round, config, contender, result file, load before and
# after, process wall seconds.
runs="$out/runs.tsv"
: >"$runs"
n_contenders=${#contenders[@]}
for ((r = 1; r <= repeats; r++)); do
  if [ -n "$sgemm" ]; then
    lb="$(loadavg)"
    echo "== round $r: sgemm (load before $lb)" | log
    kb="$(core_link "$r.sgemm.before")"
    "$sgemm" --threads "$threads" --json "$out/sgemm.$r.json" 2>&1 | log
    ka="$(core_link "$r.sgemm.after")"
    la="$(loadavg)"
    echo "load after $la" | log
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" - sgemm "$out/sgemm.$r.json" "$lb" "$la" 0 "$kb" "$ka" >>"$runs"
  fi
  for cfg in "${configs[@]}"; do
    name="$(basename "$cfg" .yaml)"
    for ((o = 0; o < n_contenders; o++)); do
      c="${contenders[$(((o + r - 1) % n_contenders))]}"
      lb="$(loadavg)"
      echo "== round $r: $name: $c (load before $lb)" | log
      kb="$(core_link "$r.$name.$c.before")"
      start=$(date +%s%N)
      case "$c" in
        codistill*)
          dir="$out/$r/$name/$c"
          "${bin[$c]}" --config "$cfg" --run-dir "$dir" --set "run.threads=$threads" \
            "${steps_set[@]}" 2>&1 | log | { grep -E "^summary|done:" || true; }
          result="$dir/worker-000/metrics.jsonl" ;;
        pytorch)
          result="$out/$r.$name.pytorch.json"
          /usr/bin/python3 bench/torch_train.py "$cfg" --threads "$threads" "${steps_arg[@]}" | log >"$result" ;;
        jax)
          result="$out/$r.$name.jax.json"
          "$jax_python" bench/jax_train.py "$cfg" --threads "$threads" "${steps_arg[@]}" | log >"$result" ;;
      esac
      end=$(date +%s%N)
      ka="$(core_link "$r.$name.$c.after")"
      la="$(loadavg)"
      echo "process_wall_ms $(( (end - start) / 1000000 )); load after $la" | log
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$cfg" "$c" "$result" "$lb" "$la" \
        "$(( (end - start) / 1000000 ))" "$kb" "$ka" >>"$runs"
    done
  done
done

# bench/provenance.py: the commit, and the source of each build.
PYTHONPATH="$root/bench${PYTHONPATH:+:$PYTHONPATH}" /usr/bin/python3 - "$runs" "$raw" "$results/train_cpu.json" "$threads" "$repeats" "$build" "${before:-}" \
  "${STEPS:-}" "${contenders[@]}" <<'PY'
import datetime, json, os, platform, statistics, sys
from provenance import source_head, tree_commit
runs_path, raw, json_path, threads, repeats, build, before, steps_env = sys.argv[1:9]
contenders = sys.argv[9:]
MLP_FLOP_PER_EXAMPLE = 1.21e6  # forward + backward GEMMs of the 784-256-256-10 MLP
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
commit = tree_commit()
def summary(values):
    return {"best": max(values), "median": statistics.median(values), "worst": min(values), "n": len(values)}

rows = [dict(zip(("round", "config", "contender", "path", "load_before", "load_after", "wall_ms", "link_before",
                  "link_after"), l.rstrip("\n").split("\t"))) for l in open(runs_path)]
NEAR_NS = 150  # the round trip between the two CPUs: 59-110 ns sharing a cache here, 260-421 ns not
def core_link(row):
    b, a = (json.load(open(row[k])) if row.get(k, "-") != "-" else None for k in ("link_before", "link_after"))
    if not b or not a:
        return None
    near = [x["round_trip_ns"] < NEAR_NS for x in (b, a)]
    return {"before": b, "after": a, "placement": "near" if all(near) else "far" if not any(near) else "mixed"}
sgemm_rounds = []
for row in rows:
    r = int(row["round"])
    if row["contender"] == "sgemm":
        d = json.load(open(row["path"]))
        sgemm_rounds.append({"round": r, "peak_gflops": d["peak_gflops"], "peak_how": d["peak_how"],
                             "mlp_step_gflops": d["mlp_step"].get("best_gflops", max(d["mlp_step"]["gflops"]["openblas_mt"],
                                                    d["mlp_step"]["gflops"]["omp_split"])),
                             "load_before": row["load_before"], "load_after": row["load_after"],
                             "core_link": core_link(row), "detail": d})
        continue
    if row["contender"].startswith("codistill"):
        done = [json.loads(l) for l in open(row["path"]) if '"done"' in l][-1]
        run = {"train_examples_per_s": done["train_examples_per_s"], "test_accuracy": done["accuracy"],
               "wall_s": done["wall_s"], "steps": done["step"]}
    else:
        d = json.load(open(row["path"]))
        run = {k: d[k] for k in ("train_examples_per_s", "test_accuracy", "train_s", "steps")}
        run["version"] = d.get("torch") or d.get("jax")
        # the 4-d layout the reference used (torch: memory_format; jax: layout, resnet only)
        run["layout"] = d.get("memory_format") or d.get("layout")
        if row["contender"] == "jax":
            run.update({k: d[k] for k in ("compile_s", "warmup_steps", "timed_steps")})
    run.update({"round": r, "load_before": row["load_before"], "load_after": row["load_after"],
                "process_wall_s": int(row["wall_ms"]) / 1e3, "core_link": core_link(row)})
    row["run"] = run

configs = list(dict.fromkeys(row["config"] for row in rows if row["contender"] != "sgemm"))
peak = summary([s["peak_gflops"] for s in sgemm_rounds]) if sgemm_rounds else None
results = []
for cfg in configs:
    per = {c: [row["run"] for row in rows if row["config"] == cfg and row["contender"] == c] for c in contenders}
    entry = {"config": cfg, "steps": per["codistill"][0]["steps"], "contenders": {}}
    for c, rs in per.items():
        entry["contenders"][c] = {"train_examples_per_s": summary([x["train_examples_per_s"] for x in rs]),
                                  "test_accuracy_median": statistics.median(x["test_accuracy"] for x in rs),
                                  "version": rs[0].get("version"), "runs": rs}
        by_place = {}
        for x in rs:
            if x["core_link"]:
                by_place.setdefault(x["core_link"]["placement"], []).append(x["train_examples_per_s"])
        entry["contenders"][c]["by_placement"] = {k: summary(v) for k, v in sorted(by_place.items())}
    ours = entry["contenders"]["codistill"]["train_examples_per_s"]
    entry["ratios"] = {}
    for other in contenders[1:]:
        theirs = entry["contenders"][other]["train_examples_per_s"]
        entry["ratios"][f"codistill/{other}"] = {"best": ours["best"] / theirs["best"],
                                                 "median": ours["median"] / theirs["median"]}
    if os.path.basename(cfg).startswith("fmnist_mlp") and peak:
        by_round = {s["round"]: s for s in sgemm_rounds}
        def gf(x): return x["train_examples_per_s"] * MLP_FLOP_PER_EXAMPLE / 1e9
        entry["sgemm"] = {"flop_per_example": MLP_FLOP_PER_EXAMPLE, "peak_gflops": peak}
        for c in contenders:
            rs = entry["contenders"][c]["runs"]
            entry["sgemm"][c] = {
                "gflops": summary([gf(x) for x in rs]),
                # best vs best peak, and the median over rounds of the run against its round's peak
                "pct_of_peak_best": 100 * max(gf(x) for x in rs) / peak["best"],
                "pct_of_peak_median": statistics.median(100 * gf(x) / by_round[x["round"]]["peak_gflops"] for x in rs),
                "pct_of_mlp_gemm_peak_best": 100 * max(gf(x) for x in rs) / max(s["mlp_step_gflops"] for s in sgemm_rounds)}
            pcts = {}
            for x in rs:
                if x["core_link"]:
                    pcts.setdefault(x["core_link"]["placement"], []).append(
                        100 * gf(x) / by_round[x["round"]]["peak_gflops"])
            entry["sgemm"][c]["pct_of_peak_median_by_placement"] = {k: statistics.median(v)
                                                                     for k, v in sorted(pcts.items())}
    results.append(entry)

doc = {"benchmark": "train_cpu", "device": cpu, "threads": int(threads), "repeats": int(repeats),
       "steps_override": int(steps_env) if steps_env else None,
       "date": datetime.datetime.now().isoformat(timespec="seconds"), "commit": commit,
       "host": platform.node(), "build": build, "build_source": source_head(build),
       "before_build": before or None, "before_source": source_head(before) if before else None,
       "order": "round by round: sgemm, then per config " + ", ".join(contenders) + ", rotated by one each round",
       "timing": "train_examples_per_s over the step loop, evaluation excluded; jax also excludes "
                 "its ahead-of-time compile and its first 5 steps",
       "sgemm": {"peak_gflops": peak, "rounds": sgemm_rounds}, "results": results}
with open(json_path, "w") as f:
    json.dump(doc, f, indent=2)

cw = max([12] + [len(os.path.basename(e["config"])[:-5]) for e in results])  # fmnist_resnet is 13
lines = [f"{'config':<{cw}} {'contender':<17} {'best ex/s':>10} {'median ex/s':>12} {'worst ex/s':>11} "
         f"{'acc (med)':>9}  load before -> after (1-min avg, per run)"]
for e in results:
    name = os.path.basename(e["config"])[:-5]
    for c, s in e["contenders"].items():
        t = s["train_examples_per_s"]
        loads = " ".join(f"{x['load_before'].split()[0]}->{x['load_after'].split()[0]}" for x in s["runs"])
        lines.append(f"{name:<{cw}} {c:<17} {t['best']:>10.0f} {t['median']:>12.0f} {t['worst']:>11.0f} "
                     f"{100 * s['test_accuracy_median']:>8.2f}%  {loads}")
        for p, t in s["by_placement"].items():
            lines.append(f"{name:<{cw}} {c:<17} {p:>5} placement: {t['n']} run(s), best {t['best']:.0f}, "
                         f"median {t['median']:.0f} ex/s")
    for k, v in e["ratios"].items():
        lines.append(f"{name:<{cw}} {k:<27} ratio best {v['best']:5.2f}  median {v['median']:5.2f}")
    if "sgemm" in e:
        for c in contenders:
            g = e["sgemm"][c]
            lines.append(f"{name:<{cw}} {c:<17} {g['gflops']['best']:6.1f} GFLOP/s best = {g['pct_of_peak_best']:5.1f}% "
                         f"of the sgemm peak (median per round {g['pct_of_peak_median']:5.1f}%; "
                         f"{g['pct_of_mlp_gemm_peak_best']:5.1f}% of its own GEMMs' best)")
            by = g["pct_of_peak_median_by_placement"]
            if by:
                lines.append(f"{name:<{cw}} {c:<17} median % of its round's peak by placement: " +
                             ", ".join(f"{p} {v:.1f}%" for p, v in by.items()))
if peak:
    lines.append(f"sgemm peak ({threads} threads): best {peak['best']:.1f} median {peak['median']:.1f} GFLOP/s "
                 f"({sgemm_rounds[0]['peak_how']}...); the MLP's own GEMMs at batch 128: best "
                 f"{max(s['mlp_step_gflops'] for s in sgemm_rounds):.1f} GFLOP/s")
if sgemm_rounds and sgemm_rounds[0]["core_link"]:
    lines.append("sgemm rounds' placement: " + " ".join(
        f"r{s['round']} {s['core_link']['placement']} ({s['peak_gflops']:.0f})" for s in sgemm_rounds))
lines.append(f"placement: the CPUs' cache-line round trip before and after each run, near < {NEAR_NS} ns "
             "in both, far > in both, else mixed" if any(r.get("link_before", "-") != "-" for r in rows)
             else "placement: not measured")
lines.append(f"({cpu}, {threads} threads, {repeats} rounds, commit {commit})")
print("\n".join(lines))
with open(raw, "a") as f:
    f.write("== summary\n" + "\n".join(lines) + "\n")
PY
