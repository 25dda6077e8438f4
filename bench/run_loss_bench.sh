#!/usr/bin/env bash
# Loss benchmark, side by side in one run: codistill's fused CPU distillation loss
# (bench/bench_loss) and the same math in PyTorch (bench/torch_loss.py), forward +
# backward, float32, same shapes, thread count and timing method (warm-up, then the median
# of repeats), alternating shape by shape. PyTorch first recomputes one shared input from
# bench_loss --dump and must agree with our loss and gradient. Prints the side-by-side table with the speed-up and
# writes bench/results/loss_cpu.json (with CPU model, date, commit, load average) and
# bench/results/loss_cpu.txt (raw output).
#   bench/run_loss_bench.sh
# Environment: THREADS (default 2), REPEATS (default 20), BUILD_DIR (default build/).
# The machine should be otherwise idle: the load average at the start is recorded.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${BUILD_DIR:-$root/build}"
threads="${THREADS:-2}"
repeats="${REPEATS:-20}"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" --target bench_loss -j "${JOBS:-$(nproc)}" >/dev/null
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/check" bench/results
raw="$root/bench/results/loss_cpu.txt"
load="$(cut -d' ' -f1-3 /proc/loadavg)"
# Share of all cores busy over the last second (the load average lags by minutes).
busy="$(read -r _ a b c d e f g h _ </proc/stat; t1=$((a+b+c+d+e+f+g+h)); i1=$((d+e)); sleep 1
        read -r _ a b c d e f g h _ </proc/stat; t2=$((a+b+c+d+e+f+g+h)); i2=$((d+e))
        echo $((100 * ((t2 - t1) - (i2 - i1)) / (t2 - t1))))"
load="$load (cpu busy ${busy}% just before)"
: >"$raw"
log() { tee -a "$raw"; }
echo "load average at start: $load" | log
# The check first: both sides compute one shared input, PyTorch compares.
"$build/bench/bench_loss" --dump "$out/check"
status=0
/usr/bin/python3 bench/torch_loss.py --check "$out/check" --json "$out/check.json" 2>&1 | log ||
  status=$?
# Then shape by shape, ours and PyTorch back to back, so both see the same machine.
for i in 1 2 3; do
  "$build/bench/bench_loss" --threads "$threads" --repeats "$repeats" --only "$i" \
    --json "$out/ours$i.json" 2>&1 | log
  /usr/bin/python3 bench/torch_loss.py --threads "$threads" --repeats "$repeats" --only "$i" \
    --json "$out/torch$i.json" 2>&1 | log
done

/usr/bin/python3 - "$out" "$raw" "$load" <<'PY'
import datetime, json, platform, subprocess, sys
out, raw, load_avg = sys.argv[1], sys.argv[2], sys.argv[3]
def load(side):
    docs = [json.load(open(f"{out}/{side}{i}.json")) for i in (1, 2, 3)]
    docs[0]["results"] = [r for d in docs for r in d["results"]]
    return docs[0]
ours, torch = load("ours"), load("torch")
check = json.load(open(f"{out}/check.json"))["check"]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
def git(*args):
    return subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()
commit = git("rev-parse", "--short", "HEAD") + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
rows = []
for o, t in zip(ours["results"], torch["results"]):
    assert (o["N"], o["V"], o["K"]) == (t["N"], t["V"], t["K"]), "shape lists differ"
    rows.append({"N": o["N"], "V": o["V"], "K": o["K"], "temperature": o["temperature"],
                 "codistill_fast_ms": o["fast"]["median_ms"], "codistill_fast_min_ms": o["fast"]["min_ms"],
                 "codistill_reference_ms": o["reference"]["median_ms"],
                 "pytorch_ms": t["median_ms"], "pytorch_min_ms": t["min_ms"],
                 "speedup_vs_pytorch": t["median_ms"] / o["fast"]["median_ms"]})
doc = {"benchmark": "loss_cpu", "device": cpu, "threads": ours["threads"], "dtype": "float32",
       "date": datetime.datetime.now().isoformat(timespec="seconds"), "commit": commit,
       "host": platform.node(), "load_average_at_start": load_avg, "torch": torch["torch"],
       "timing": f"median of {torch['results'][0]['repeats']} calls after {ours['warmup']} warm-up calls, fwd+bwd",
       "check_against_pytorch": check, "results": rows}
json.dump(doc, open("bench/results/loss_cpu.json", "w"), indent=2)
lines = [f"{'N':>6} {'V':>6} {'K':>2} {'codistill ms':>13} {'pytorch ms':>11} {'speed-up':>9} "
         f"{'(min: ours':>11} {'torch':>8} {'ratio)':>7} {'reference ms':>13}"]
for r in rows:
    lines.append(f"{r['N']:>6} {r['V']:>6} {r['K']:>2} {r['codistill_fast_ms']:>13.2f} {r['pytorch_ms']:>11.2f} "
                 f"{r['speedup_vs_pytorch']:>8.1f}x {r['codistill_fast_min_ms']:>11.2f} {r['pytorch_min_ms']:>8.2f} "
                 f"{r['pytorch_min_ms'] / r['codistill_fast_min_ms']:>6.1f}x {r['codistill_reference_ms']:>13.1f}")
lines.append(f"({cpu}, {ours['threads']} threads, T=2 a=1 h=1, commit {commit}, load average {load_avg})")
print("\n".join(lines))
with open(raw, "a") as f:
    f.write("== side by side\n" + "\n".join(lines) + "\n")
PY
exit "$status"
