#!/usr/bin/python3
"""Paired comparison of bench_loss binaries (e.g. two commits' builds), with an A/A control.

Why: on this shared 2-core host one run's time moves by 5-10% from run to run, more than
the differences worth knowing. Here every round runs each shape on every contender back to
back, the order rotated by one each round, and the ratio base/contender is taken per round
(a paired comparison: a slow spell hits the whole round). Give the base binary twice under
two names (a copy at another path) and the second copy's ratios show what the harness
itself reports for no difference.

  bench/compare_loss_builds.py [--rounds R] [--threads N] [--calls C] [--shapes "1 2 3"]
                               [--json PATH] NAME=BINARY NAME=BINARY ...
The first NAME is the base. Per shape and contender it prints the best and median run time
(a run's time is the minimum, resp. the median, of C calls) and the median over rounds of
the paired ratio base time / contender time (> 1: the contender is faster) with a 95%
bootstrap interval. The JSON holds every run's times and the load average per round.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time


def bootstrap_median(x, n=2000, seed=1):
    rnd = random.Random(seed)
    m = sorted(statistics.median(rnd.choice(x) for _ in x) for _ in range(n))
    return m[int(0.025 * n)], m[int(0.975 * n) - 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--shapes", default="1 2 3", help="bench_loss --only indices")
    ap.add_argument("--json", help="write every run's times here")
    ap.add_argument("contenders", nargs="+", help="NAME=BINARY, the first is the base")
    a = ap.parse_args()
    cont = []
    for c in a.contenders:
        name, sep, path = c.partition("=")
        if not sep or not name or not os.access(path, os.X_OK):
            sys.exit(f"compare_loss_builds: '{c}' is not NAME=EXECUTABLE")
        cont.append((name, path))
    if len({n for n, _ in cont}) != len(cont) or len(cont) < 2:
        sys.exit("compare_loss_builds: need at least two contenders with distinct names")
    shapes = [int(s) for s in a.shapes.split()]
    runs = {n: {s: [] for s in shapes} for n, _ in cont}
    loads = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run.json")
        for r in range(a.rounds):
            k = r % len(cont)
            for s in shapes:
                for name, path in cont[k:] + cont[:k]:
                    subprocess.run([path, "--threads", str(a.threads), "--only", str(s),
                                    "--repeats", str(a.calls), "--ref-repeats", "1", "--json", out],
                                   check=True, stdout=subprocess.DEVNULL)
                    res = json.load(open(out))["results"][0]
                    runs[name][s].append({"min_ms": res["fast"]["min_ms"],
                                          "median_ms": res["fast"]["median_ms"],
                                          "shape": [res["N"], res["V"], res["K"]]})
            loads.append(open("/proc/loadavg").read().split()[:3])
            print(f"round {r + 1}/{a.rounds} load {' '.join(loads[-1])}", flush=True)
    base = cont[0][0]
    summary = []
    for s in shapes:
        N, V, K = runs[base][s][0]["shape"]
        print(f"N {N} V {V} K {K}: best / median ms of the runs' min (median) call; "
              f"paired {base}/contender, median [95% interval]")
        for name, _ in cont:
            row = {"N": N, "V": V, "K": K, "contender": name}
            line = f"  {name:12s}"
            for key in ("min_ms", "median_ms"):
                t = [x[key] for x in runs[name][s]]
                row[key] = {"best": min(t), "median": statistics.median(t)}
                line += f" {key[:-3]} {min(t):8.3f} / {statistics.median(t):8.3f}"
            if name != base:
                for key in ("min_ms", "median_ms"):
                    ratio = [b[key] / c[key] for b, c in zip(runs[base][s], runs[name][s])]
                    lo, hi = bootstrap_median(ratio)
                    row["ratio_" + key[:-3]] = {"median": statistics.median(ratio), "lo": lo, "hi": hi}
                    line += f" | {key[:-3]} {statistics.median(ratio):.3f} [{lo:.3f}, {hi:.3f}]"
            summary.append(row)
            print(line)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"benchmark": "loss_cpu_paired", "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                       "threads": a.threads, "calls": a.calls, "rounds": a.rounds,
                       "contenders": dict(cont), "loadavg_per_round": loads,
                       "summary": summary, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
