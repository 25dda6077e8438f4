#!/usr/bin/python3
"""Summary of bench/run_teacher_overhead.sh: per config and K, the best and median
throughput over the rounds, the step-time ratio to K = 0 and the overhead per teacher
((ratio - 1) / K), best vs best and median vs median; and the FLOP floor: a teacher's
forward work over the student's forward + backward work, counted from the model section
(mlp and resnet kinds; None for others). A teacher forward that ran exactly as fast per
FLOP as the student's step would cost that share; beating it needs a cheaper teacher
(lower precision, cached logits), not a faster kernel.
  teacher_overhead_report.py RUNS.tsv RAW.txt OUT.json THREADS REPEATS BUILD
"""
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

import yaml


def mlp_macs(m, in_features, classes):
    dims = [in_features] + list(m.get("hidden", [256, 256])) + [classes]
    fwd = sum(a * b for a, b in zip(dims, dims[1:]))
    # backward: every weight gradient, and input gradients of all layers but the first
    dx = sum(a * b for a, b in zip(dims[1:], dims[2:]))
    return fwd, fwd + dx


def resnet_macs(m, shape, classes):
    """build_resnet in codistill/models/build.cpp: 3x3 stem, stages of basic blocks (two
    3x3 convs), stride 2 and a 1x1 projection where a stage changes width or size, global
    average pooling, one linear layer. Batch norm, activations and pooling are left out
    (elementwise, a few per cent)."""
    c, h, w = shape
    chans = list(m.get("channels", [16, 32, 64]))
    blocks = int(m.get("blocks", 1))
    first = h * w * chans[0] * c * 9  # the stem: the one conv without an input gradient
    fwd = first
    cin = chans[0]
    for i, cout in enumerate(chans):
        for b in range(blocks):
            stride = 2 if (i > 0 and b == 0) else 1
            h2, w2 = (h + stride - 1) // stride, (w + stride - 1) // stride
            fwd += h2 * w2 * cout * cin * 9 + h2 * w2 * cout * cout * 9
            if stride != 1 or cin != cout:
                fwd += h2 * w2 * cout * cin
            h, w, cin = h2, w2, cout
    fwd += cin * classes
    return fwd, fwd + (fwd - first)


def flop_floor(cfg_path):
    cfg = yaml.safe_load(open(cfg_path))
    m = cfg["model"]
    shape, classes = [1, 28, 28], 10  # Fashion-MNIST, the data of every shipped config
    if m["kind"] == "mlp":
        fwd, fwd_bwd_extra = mlp_macs(m, shape[0] * shape[1] * shape[2], classes)
    elif m["kind"] == "resnet":
        fwd, fwd_bwd_extra = resnet_macs(m, shape, classes)
    else:
        return None
    return fwd / (fwd + fwd_bwd_extra)


def main():
    runs_path, raw, json_path, threads, repeats, build = sys.argv[1:7]
    rows = [dict(zip(("round", "config", "k", "eps", "load_before", "load_after", "steps"),
                     l.rstrip("\n").split("\t"))) for l in open(runs_path)]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    results, lines = [], []
    for cfg in dict.fromkeys(r["config"] for r in rows):
        per_k = {}
        for r in rows:
            if r["config"] == cfg:
                per_k.setdefault(int(r["k"]), []).append(r)
        entry = {"config": cfg, "steps": int(rows[0]["steps"]), "flop_floor_per_teacher": flop_floor(cfg), "k": {}}
        base = per_k.get(0)
        for k, rs in sorted(per_k.items()):
            eps = [float(r["eps"]) for r in rs]
            e = {"examples_per_s": {"best": max(eps), "median": statistics.median(eps), "n": len(eps)},
                 "runs": [{"round": int(r["round"]), "examples_per_s": float(r["eps"]),
                           "load_before": r["load_before"], "load_after": r["load_after"]} for r in rs]}
            if base and k > 0:
                b = [float(r["eps"]) for r in base]
                ratio_best = max(b) / max(eps)
                ratio_median = statistics.median(b) / statistics.median(eps)
                e["step_time_ratio"] = {"best": ratio_best, "median": ratio_median}
                e["overhead_per_teacher"] = {"best": (ratio_best - 1) / k, "median": (ratio_median - 1) / k}
            entry["k"][str(k)] = e
        results.append(entry)
        name = os.path.basename(cfg)[:-5]
        floor = entry["flop_floor_per_teacher"]
        for k, e in entry["k"].items():
            t = e["examples_per_s"]
            loads = " ".join(f"{x['load_before'].split()[0]}->{x['load_after'].split()[0]}" for x in e["runs"])
            line = f"{name:<16} K={k}  best {t['best']:>9.0f}  median {t['median']:>9.0f} ex/s"
            if "overhead_per_teacher" in e:
                o, s = e["overhead_per_teacher"], e["step_time_ratio"]
                line += (f"  step x{s['best']:.2f} (median x{s['median']:.2f})"
                         f"  per teacher {o['best']:.2f} (median {o['median']:.2f})")
            lines.append(line + f"  load {loads}")
        if floor is not None:
            lines.append(f"{name:<16} FLOP floor per teacher (forward / forward+backward): {floor:.3f}")
    lines.append(f"({cpu}, {threads} threads, {repeats} rounds, commit {commit})")
    doc = {"benchmark": "teacher_overhead_cpu", "device": cpu, "threads": int(threads),
           "repeats": int(repeats), "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "commit": commit, "host": platform.node(), "build": build,
           "timing": "done.train_examples_per_s of worker 0 (step loop, evaluation excluded)",
           "overhead": "(step time with K teachers / step time alone - 1) / K, best vs best and median vs median",
           "results": results}
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=2)
    print("\n".join(lines))
    with open(raw, "a") as f:
        f.write("== summary\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
