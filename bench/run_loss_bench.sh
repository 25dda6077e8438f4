#!/usr/bin/env bash
# Loss benchmark, side by side in one run: codistill's fused CPU distillation loss
# (bench/bench_loss), the same math in PyTorch (bench/torch_loss.py, Debian's torch) and in
# JAX/XLA (bench/jax_loss.py, PyPI jax[cpu] in .venv-bench/), forward + backward, float32,
# same shapes (N=4096 V=1000 K=1; K=4; N=1024 V=32768 K=1), thread count and timing method
# (warm-up calls, then the median of CALLS calls: one run's time).
# First both references recompute one shared input from bench_loss --dump and must agree
# with our loss and gradient. Then the contenders alternate: round r runs, shape by shape,
# codistill, [codistill-before,] pytorch, jax, rotated by one each round; REPEATS rounds. The load average
# (/proc/loadavg) is recorded before and after every run. The table gives per shape and
# contender the best and the median over rounds of the run times, and the throughput ratios
# codistill/jax, codistill/pytorch (and codistill/codistill-before), best vs best and median
# vs median (a ratio > 1: codistill is faster).
# Writes RESULTS_DIR/loss_cpu.json (CPU model, date, commit, loads) and RESULTS_DIR/loss_cpu.txt
# (raw output).
#   bench/run_loss_bench.sh
# Environment:
#   THREADS (2), REPEATS (3 rounds), CALLS (20 timed calls per run)
#   BUILD_DIR (build/)   the codistill build measured (its bench_loss is built there)
#   SKIP_BUILD=1         use BUILD_DIR as it is, build nothing
#   BEFORE_BUILD=DIR     a second build (e.g. of an older commit) whose bench/bench_loss runs
#                        as "codistill-before", with the ratio codistill/codistill-before
#   JAX_PYTHON           interpreter with jax (default .venv-bench/bin/python)
#   RESULTS_DIR          where the results go (default bench/results)
#   CODISTILL_CPU_ISA    baseline | avx2 | avx512: codistill's code for a lesser CPU (both
#                        builds; PyTorch and JAX are unaffected). The results record the
#                        request and, per codistill build, the copy it reports it ran (never
#                        above what the CPU runs; "not reported" for builds older than that)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
"$root/scripts/setup.sh" --bench
build="$(realpath -m "${BUILD_DIR:-$root/build}")"
threads="${THREADS:-2}"
repeats="${REPEATS:-3}"
calls="${CALLS:-20}"
jax_python="${JAX_PYTHON:-$root/.venv-bench/bin/python}"
results="${RESULTS_DIR:-$root/bench/results}"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  fi
  cmake --build "$build" --target bench_loss -j "${JOBS:-$(nproc)}" >/dev/null
fi
. "$root/bench/contenders.sh"
codistill_contenders run_loss_bench.sh bench/bench_loss

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/check" "$results"
raw="$results/loss_cpu.txt"
: >"$raw"
log() { tee -a "$raw"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
# Share of all cores busy over the last second (the load average lags by minutes).
busy="$(read -r _ a b c d e f g h _ </proc/stat; t1=$((a+b+c+d+e+f+g+h)); i1=$((d+e)); sleep 1
        read -r _ a b c d e f g h _ </proc/stat; t2=$((a+b+c+d+e+f+g+h)); i2=$((d+e))
        echo $((100 * ((t2 - t1) - (i2 - i1)) / (t2 - t1))))"
start_load="$(loadavg) (cpu busy ${busy}% just before)"
echo "load average at start: $start_load" | log
echo "contenders: ${contenders[*]}; $repeats rounds of $calls calls, $threads threads; build $build${before:+, before $before}" | log
echo "codistill's CPU code: ${CODISTILL_CPU_ISA:-the best this CPU runs} (CODISTILL_CPU_ISA)" | log
# The check first: both references recompute one shared input and compare with ours.
"${bin[codistill]}" --dump "$out/check"
status=0
/usr/bin/python3 bench/torch_loss.py --check "$out/check" --json "$out/check.pytorch.json" 2>&1 | log ||
  status=$?
"$jax_python" bench/jax_loss.py --check "$out/check" --json "$out/check.jax.json" 2>&1 | log ||
  status=$?
# Round by round, shape by shape, the contenders back to back, so all see the same machine.
# The order rotates by one each round: the same binary ran a few percent faster or slower
# depending on its place in the round, which a fixed order turns into a false ratio.
runs="$out/runs.tsv"
: >"$runs"
n_contenders=${#contenders[@]}
for ((r = 1; r <= repeats; r++)); do
  for i in 1 2 3; do
    for ((o = 0; o < n_contenders; o++)); do
      c="${contenders[$(((o + r - 1) % n_contenders))]}"
      lb="$(loadavg)"
      echo "== round $r shape $i: $c (load before $lb)" | log
      json="$out/$r.$i.$c.json"
      case "$c" in
        codistill*)
          "${bin[$c]}" --threads "$threads" --repeats "$calls" --ref-repeats 1 --only "$i" --json "$json" 2>&1 | log ;;
        pytorch)
          /usr/bin/python3 bench/torch_loss.py --threads "$threads" --repeats "$calls" --only "$i" --json "$json" 2>&1 | log ;;
        jax)
          "$jax_python" bench/jax_loss.py --threads "$threads" --repeats "$calls" --only "$i" --json "$json" 2>&1 | log ;;
      esac
      la="$(loadavg)"
      echo "load after $la" | log
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$i" "$c" "$json" "$lb" "$la" >>"$runs"
    done
  done
done

# bench/provenance.py: the commit, and the source of each build.
PYTHONPATH="$root/bench${PYTHONPATH:+:$PYTHONPATH}" /usr/bin/python3 - "$runs" "$raw" "$results/loss_cpu.json" "$start_load" "$out" "$repeats" "$calls" \
  "$threads" "$build" "${before:-}" "${contenders[@]}" <<'PY'
import datetime, json, os, platform, statistics, sys
from provenance import source_head, tree_commit
runs_path, raw, json_path, start_load, out, repeats, calls, threads, build, before = sys.argv[1:11]
contenders = sys.argv[11:]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
commit = tree_commit()

runs = []
versions = {}
isas = {}  # the ISA copy each codistill build reports it ran (builds before bench_loss said so: none)
for l in open(runs_path):
    r, i, c, path, lb, la = l.rstrip("\n").split("\t")
    d = json.load(open(path))
    res = d["results"][0]
    timing = res["fast"] if c.startswith("codistill") else res
    versions[c] = d.get("torch") or d.get("jax")
    if c.startswith("codistill"):
        isas.setdefault(c, set()).add(d.get("isa") or "not reported")
    runs.append({"round": int(r), "shape": int(i), "contender": c, "N": res["N"], "V": res["V"], "K": res["K"],
                 "median_ms": timing["median_ms"], "min_ms": timing["min_ms"], "loss": res.get("loss", res.get("loss_fast")),
                 "reference_ms": res["reference"]["median_ms"] if c.startswith("codistill") else None,
                 "load_before": lb, "load_after": la})
checks = {side: json.load(open(f"{out}/check.{side}.json"))["check"] for side in ("pytorch", "jax")}
rows = []
for i in sorted({x["shape"] for x in runs}):
    mine = [x for x in runs if x["shape"] == i]
    row = {"N": mine[0]["N"], "V": mine[0]["V"], "K": mine[0]["K"], "temperature": 2.0, "contenders": {}, "ratios": {}}
    for c in contenders:
        ms = [x["median_ms"] for x in mine if x["contender"] == c]
        row["contenders"][c] = {"best_ms": min(ms), "median_ms": statistics.median(ms), "worst_ms": max(ms),
                                "runs": [x for x in mine if x["contender"] == c]}
        refs = [x["reference_ms"] for x in mine if x["contender"] == c and x["reference_ms"] is not None]
        if refs:
            row["contenders"][c]["reference_median_ms"] = statistics.median(refs)
    ours = row["contenders"]["codistill"]
    for other in contenders[1:]:
        theirs = row["contenders"][other]
        # throughput ratio = their time / ours
        row["ratios"][f"codistill/{other}"] = {"best": theirs["best_ms"] / ours["best_ms"],
                                               "median": theirs["median_ms"] / ours["median_ms"]}
    rows.append(row)
doc = {"benchmark": "loss_cpu", "device": cpu, "threads": int(threads),
       "dtype": "float32", "date": datetime.datetime.now().isoformat(timespec="seconds"), "commit": commit,
       "host": platform.node(), "build": build, "build_source": source_head(build),
       "before_build": before or None, "before_source": source_head(before) if before else None,
       "load_average_at_start": start_load, "versions": versions, "repeats": int(repeats), "calls": int(calls),
       "cpu_isa_requested": os.environ.get("CODISTILL_CPU_ISA") or "best",
       "cpu_isa": {c: "/".join(sorted(v)) for c, v in isas.items()},
       "order": "round by round, shape by shape, rotated by one each round: " + ", ".join(contenders),
       "timing": f"a run's time is the median of {calls} calls after 3 warm-up calls, fwd+bwd; best and median over "
                 f"{repeats} rounds; jax compiles before its warm-up calls; jax gradient written out (jax_loss.py --grad closed)",
       "check_against_pytorch": checks["pytorch"], "check_against_jax": checks["jax"], "results": rows}
with open(json_path, "w") as f:
    json.dump(doc, f, indent=2)
lines = [f"{'N':>5} {'V':>6} {'K':>2} {'contender':<17} {'best ms':>9} {'median ms':>10} {'worst ms':>9}  "
         f"load before -> after (1-min avg, per run)"]
for row in rows:
    shape = f"{row['N']:>5} {row['V']:>6} {row['K']:>2}"
    for c, s in row["contenders"].items():
        loads = " ".join(f"{x['load_before'].split()[0]}->{x['load_after'].split()[0]}" for x in s["runs"])
        lines.append(f"{shape} {c:<17} {s['best_ms']:>9.2f} {s['median_ms']:>10.2f} {s['worst_ms']:>9.2f}  {loads}")
    for k, v in row["ratios"].items():
        lines.append(f"{shape} {k:<27} speed-up best {v['best']:6.2f}x  median {v['median']:6.2f}x")
    ref = row["contenders"]["codistill"].get("reference_median_ms")
    if ref:
        lines.append(f"{shape} codistill reference (plain loops): median {ref:.1f} ms")
ran = ", ".join(f"{c} {v}" for c, v in doc["cpu_isa"].items())
lines.append(f"({cpu}, ISA asked {doc['cpu_isa_requested']}, ran: {ran}; {doc['threads']} threads, T=2 a=1 h=1, {repeats} rounds of {calls} calls, commit {commit}, "
             f"load average at start {start_load}; checks: pytorch {'OK' if checks['pytorch']['ok'] else 'MISMATCH'}, "
             f"jax {'OK' if checks['jax']['ok'] else 'MISMATCH'})")
print("\n".join(lines))
with open(raw, "a") as f:
    f.write("== summary\n" + "\n".join(lines) + "\n")
PY
exit "$status"
