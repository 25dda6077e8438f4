#!/usr/bin/python3
"""Plots an ensemble-size sweep (scripts/sweep_ensemble.sh) with gnuplot:

    scripts/plot_sweep.py SWEEP_DIR [--out PNG]

Reads SWEEP_DIR/summary.csv and SWEEP_DIR/n<N>/worker-*/metrics.jsonl and writes
SWEEP_DIR/summary.png (or PNG) with two panels:
  (a) test accuracy against training steps, one curve per ensemble size N: the mean over
      the N workers of their `eval` events (a step counts once per worker: the last
      evaluation at that step, as after a resume);
  (b) against N: the workers' final test accuracy (mean, with min..max bars), the
      accuracy of the ensemble of their final checkpoints, and (right axis) the mean
      pairwise churn between them.
The data files and the gnuplot script are kept in SWEEP_DIR/plot/ (re-run gnuplot on
summary.gp to restyle). Only the standard library (json, csv) is used; gnuplot's
pngcairo terminal, else png. Exit codes: 0 written, 1 no data or gnuplot failed, 2 usage.
"""
import csv
import glob
import json
import os
import shutil
import subprocess
import sys


def die(msg, code=1):
    print("plot_sweep.py: " + msg, file=sys.stderr)
    sys.exit(code)


def eval_curve(run_dir):
    """{step: mean accuracy over the workers that evaluated at that step}."""
    per_step = {}
    for metrics in sorted(glob.glob(os.path.join(run_dir, "worker-*", "metrics.jsonl"))):
        last = {}
        with open(metrics) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    e = json.loads(line)
                except ValueError:
                    continue  # a line cut by a killed worker
                if e.get("event") == "eval" and e.get("accuracy") is not None:
                    last[int(e["step"])] = float(e["accuracy"])
        for step, acc in last.items():
            per_step.setdefault(step, []).append(acc)
    return {s: sum(a) / len(a) for s, a in per_step.items()}


def codistilled(run_dir):
    """codistill.enabled of the run's resolved config.yaml (a plain text scan), or None."""
    section = None
    try:
        with open(os.path.join(run_dir, "config.yaml")) as f:
            for line in f:
                if line[:1].isalpha():
                    section = line.split(":")[0].strip()
                elif section == "codistill" and line.strip().startswith("enabled:"):
                    return line.split(":", 1)[1].strip().lower() == "true"
    except OSError:
        pass
    return None


def label(n, run_dir):
    mode = codistilled(run_dir)
    if mode is None:
        return "N = %d" % n
    return "N = %d (%s)" % (n, "codistilled" if mode else ("alone" if n == 1 else "independent"))


def number(row, key):
    v = row.get(key, "")
    return float(v) if v not in ("", None) else None


def gp_quote(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def terminal():
    gp = shutil.which("gnuplot")
    if not gp:
        die("gnuplot not found (Debian: apt-get install gnuplot-nox, or scripts/setup.sh --bench)")
    probe = subprocess.run([gp, "-e", "set terminal pngcairo"], capture_output=True, text=True)
    if probe.returncode == 0 and not probe.stderr.strip():
        return gp, "pngcairo size 1400,640 noenhanced font 'Sans,11'"
    return gp, "png size 1400,640 noenhanced"


def read_rows(sweep):
    """The rows of SWEEP/summary.csv that name an N (dies without any)."""
    summary = os.path.join(sweep, "summary.csv")
    if not os.path.isfile(summary):
        die("no " + summary, 2)
    with open(summary, newline="") as f:
        rows = [r for r in csv.DictReader(f)]
    rows = [r for r in rows if r.get("n")]
    if not rows:
        die(summary + " has no rows")
    return rows


def write_curves(sweep, rows, plot_dir):
    """(a) one data file per N: step, mean accuracy (%). Returns (n, path, title) of each."""
    curves = []
    for r in rows:
        n = int(r["n"])
        curve = eval_curve(os.path.join(sweep, "n%d" % n))
        if not curve:
            continue
        path = os.path.join(plot_dir, "curve-n%d.dat" % n)
        with open(path, "w") as f:
            f.write("# step  mean test accuracy (%%) over the %d worker(s)\n" % n)
            for step in sorted(curve):
                f.write("%d %.4f\n" % (step, 100 * curve[step]))
        curves.append((n, path, label(n, os.path.join(sweep, "n%d" % n))))
    return curves


def write_final(rows, final):
    """(b) n, mean, min, max, ensemble (%), churn (fraction; NaN when absent). Returns
    whether any row has a churn."""
    pct = lambda v: "NaN" if v is None else "%.4f" % (100 * v)
    have_churn = False
    with open(final, "w") as f:
        f.write("# n  acc_mean acc_min acc_max ensemble_acc (%)  churn_mean (%)\n")
        for r in sorted(rows, key=lambda r: int(r["n"])):
            churn = number(r, "churn_mean")
            have_churn = have_churn or churn is not None
            f.write("%d %s %s %s %s %s\n" % (
                int(r["n"]), pct(number(r, "acc_mean")), pct(number(r, "acc_min")),
                pct(number(r, "acc_max")), pct(number(r, "ensemble_acc")), pct(churn)))
    return have_churn


def panel_a(curves):
    """gnuplot lines of (a): the accuracy curves, one per N."""
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
    lines = [
        "set title '(a) Test accuracy during training (mean over the N workers)'",
        "set xlabel 'training step'",
        "set ylabel 'test accuracy (%)'",
        "set autoscale",
        "set offsets 0, 0, graph 0.05, graph 0.05",
    ]
    if curves:
        lines.append("plot " + ", \\\n     ".join(
            "%s using 1:2 with linespoints lw 2 pt 7 ps 0.6 lc rgb '%s' title %s" % (
                gp_quote(path), colors[i % len(colors)], gp_quote(title_n))
            for i, (n, path, title_n) in enumerate(curves)))
    else:
        lines += ["set label 1 'no eval events' at graph 0.5, 0.5 center", "plot NaN notitle", "unset label 1"]
    return lines


def panel_b(ns, final, have_churn):
    """gnuplot lines of (b): final accuracy (and churn, right axis) against N."""
    lo, hi = ns[0], ns[-1]
    pad = max(0.5, 0.08 * (hi - lo))
    lines = [
        "set title '(b) Final test accuracy and churn against ensemble size N'",
        "set xlabel 'ensemble size N (workers)'",
        "set ylabel 'test accuracy (%)'",
        "set xtics (" + ", ".join("'%d' %d" % (n, n) for n in ns) + ")",
        "set xrange [%g:%g]" % (lo - pad, hi + pad),
        "set offsets 0, 0, graph 0.1, graph 0.1",
        "set ytics nomirror",
        "set y2label 'mean pairwise churn (%)' tc rgb '#d62728'",
        "set y2tics tc rgb '#d62728'",
        "set y2range [0:*]",
    ]
    plot_b = [
        "%s using 1:2:3:4 with yerrorlines lw 2 pt 7 ps 1 lc rgb '#1f77b4' "
        "title 'workers: mean (bars: min..max)'" % gp_quote(final),
        "%s using 1:5 with linespoints lw 2 pt 5 ps 1 dt 2 lc rgb '#2ca02c' "
        "title 'ensemble of the N final checkpoints'" % gp_quote(final),
    ]
    if have_churn:
        plot_b.append("%s using 1:6 axes x1y2 with linespoints lw 2 pt 9 ps 1.2 lc rgb '#d62728' "
                      "title 'churn between workers (right axis)'" % gp_quote(final))
    else:
        lines.append("unset y2tics; unset y2label")
    return lines + ["plot " + ", \\\n     ".join(plot_b)]


def run_gnuplot(gp, script, png):
    r = subprocess.run([gp, script], capture_output=True, text=True)
    if r.returncode != 0 or not os.path.isfile(png):
        die("gnuplot failed on %s:\n%s" % (script, r.stderr))
    # gnuplot prints warnings on stderr without failing; a single N or a flat curve gives
    # "empty y range" ones, which it handles by widening the range: not worth showing.
    for line in r.stderr.splitlines():
        if line.strip() and "empty" not in line and "no valid points" not in line:
            print("plot_sweep.py: gnuplot: " + line, file=sys.stderr)


def main(argv):
    args = argv[1:]
    if not args or args[0] in ("-h", "--help") or len(args) not in (1, 3) or (len(args) == 3 and args[1] != "--out"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sweep = os.path.abspath(args[0])
    png = os.path.abspath(args[2]) if len(args) == 3 else os.path.join(sweep, "summary.png")
    rows = read_rows(sweep)

    plot_dir = os.path.join(sweep, "plot")
    os.makedirs(plot_dir, exist_ok=True)
    curves = write_curves(sweep, rows, plot_dir)
    final = os.path.join(plot_dir, "final.dat")
    have_churn = write_final(rows, final)
    if not curves and all(number(r, "acc_mean") is None for r in rows):
        die("no accuracy to plot in " + sweep)

    gp, term = terminal()
    title = os.path.basename(sweep)
    lines = [
        "set terminal " + term,
        "set output " + gp_quote(png),
        "set datafile missing NaN",
        "set multiplot layout 1,2 title " + gp_quote("Ensemble-size sweep " + title) + " font ',13'",
        "set grid xtics ytics lt 1 lw 1 lc rgb '#d8d8d8'",
        "set key below center horizontal box maxrows 2 samplen 3 spacing 1.1",
        "set bmargin 8",
        "set border lw 1",
    ]
    lines += panel_a(curves)
    lines += panel_b(sorted(int(r["n"]) for r in rows), final, have_churn)
    lines += ["unset multiplot", "set output"]

    script = os.path.join(plot_dir, "summary.gp")
    with open(script, "w") as f:
        f.write("# Written by scripts/plot_sweep.py; run: gnuplot %s\n" % script)
        f.write("\n".join(lines) + "\n")
    run_gnuplot(gp, script, png)
    print("plot_sweep.py: wrote " + png)


if __name__ == "__main__":
    main(sys.argv)
