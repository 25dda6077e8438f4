#!/usr/bin/python3
"""Draws a codistillation run, while it trains or after, as one PNG:

    scripts/plot_run.py RUN_DIR [-o PNG]

Default output: RUN_DIR/plots/run.png (written through a temp file, so a viewer never sees a
half-written picture). One line per worker (per worker and peer for churn), against training
steps, from RUN_DIR/worker-XXX/metrics.jsonl (DESIGN.md section 7):
  training loss (total; dashed: the hard-label cross-entropy), distillation term, test loss,
  test accuracy, churn against each peer's teacher, teacher staleness (line: own step minus
  the oldest teacher's step; markers: the same at each teacher load, a triangle where the
  teacher gate refused the checkpoint), throughput
  (training examples/s), checkpoint write and stall times.
A panel whose events are not there (yet) is drawn empty with a note, and said on stderr.
A last line still being written is skipped. Needs matplotlib (Debian python3-matplotlib;
scripts/setup.sh installs it); runs under Debian's /usr/bin/python3 or .venv-tools/bin/python.
Exit codes: 0 written; 1 cannot write or no matplotlib; 2 usage, or RUN_DIR is not a run.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from codistill_metrics import NotARunDir, read_run  # noqa: E402
from codistill_metrics.interpreter import require  # noqa: E402

PROG = "plot_run.py"
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def fail(msg, code):
    print("%s: %s" % (PROG, msg), file=sys.stderr)
    sys.exit(code)


def color(i):
    return COLORS[i % len(COLORS)]


def series_with_prefix(worker, prefix):
    return [s for tag, s in sorted(worker.series.items()) if tag.startswith(prefix) and len(s)]


def lone(s):
    """A marker for a series of one point, which a bare line would not show (a run just begun)."""
    return "o" if len(s) == 1 else None


def scaled(s, factor):
    return [v * factor for v in s.values]


# Each panel: (title, y label, what it needs to say when empty, draw(ax, run) -> points drawn).
def draw_loss(ax, run):
    n = 0
    for i, w in enumerate(run.workers):
        for tag, style, label in (("train/loss", "-", w.name), ("train/ce", "--", None)):
            s = w.series.get(tag)
            if s:
                ax.plot(s.steps, s.values, style, marker=lone(s), ms=3, color=color(i), lw=1.4 if style == "-" else 1,
                        label=label)
                n += len(s)
    return n


def draw_tag(tag, factor=1.0, marker=None):
    def draw(ax, run):
        n = 0
        for i, w in enumerate(run.workers):
            s = w.series.get(tag)
            if s:
                ax.plot(s.steps, scaled(s, factor), "-", marker=marker or lone(s), ms=3, color=color(i), label=w.name)
                n += len(s)
        return n
    return draw


def draw_churn(ax, run):
    n = 0
    styles = ["-", "--", ":", "-."]
    for i, w in enumerate(run.workers):
        for j, s in enumerate(series_with_prefix(w, "eval/test/churn/")):
            peer = s.tag.rsplit("/", 1)[1]
            ax.plot(s.steps, scaled(s, 100), styles[j % len(styles)], marker="o", ms=3, color=color(i),
                    label="%s vs %s" % (w.name, peer))
            n += len(s)
    if n:
        ax.legend(fontsize=7, loc="best")
    return n


def draw_staleness(ax, run):
    n = 0
    ax.axhline(0, color="#999999", lw=0.8)  # below it: an async teacher ahead of its student
    for i, w in enumerate(run.workers):
        s = w.series.get("train/staleness")
        if s:
            ax.plot(s.steps, s.values, "-", marker=lone(s), ms=3, color=color(i), label=w.name)
            n += len(s)
        for t in series_with_prefix(w, "teacher/"):
            if t.tag.endswith("/peer_step"):
                # Checkpoints the teacher gate refused (teacher events with refused: true)
                # get a triangle instead of the x: they were loaded but did not teach.
                refused = w.series.get(t.tag[: -len("peer_step")] + "refused")
                no = dict(zip(refused.steps, refused.values)) if refused else {}
                for is_refused, marker in ((False, "x"), (True, "v")):
                    pts = [(st, st - p) for st, p in zip(t.steps, t.values) if bool(no.get(st)) == is_refused]
                    if pts:
                        ax.plot([a for a, _ in pts], [b for _, b in pts], marker, ms=4, color=color(i),
                                label="refused by the gate" if is_refused else None)
                n += len(t)
    return n


def draw_checkpoints(ax, run):
    n = 0
    for i, w in enumerate(run.workers):
        for tag, style, label in (("checkpoint/write_ms", "o-", w.name), ("checkpoint/stall_ms", "s--", None)):
            s = w.series.get(tag)
            if s:
                ax.plot(s.steps, s.values, style, ms=3, lw=1, color=color(i), label=label)
                n += len(s)
    return n


PANELS = [
    ("Training loss (dashed: cross-entropy part)", "loss", "no train events", draw_loss),
    ("Distillation term", "distill", "no train events", draw_tag("train/distill")),
    ("Test loss", "loss", "no eval events", draw_tag("eval/test/loss", marker="o")),
    ("Test accuracy", "accuracy (%)", "no eval events", draw_tag("eval/test/accuracy", 100, marker="o")),
    ("Churn against each peer", "churn (%)", "no churn (no eval with a teacher)", draw_churn),
    ("Teacher staleness (x: at each teacher load, v: refused by the gate)", "steps behind", "no teacher in use", draw_staleness),
    ("Throughput", "training examples/s", "no train events", draw_tag("train/examples_per_s")),
    ("Checkpoints (dashed: training stalled)", "ms", "no checkpoint events", draw_checkpoints),
]


def status(w):
    if not w.has_metrics:
        return "%s: no metrics yet" % w.name
    if w.done is not None:
        acc = w.done.get("accuracy")
        acc = " %.2f%%" % (100 * acc) if isinstance(acc, (int, float)) else ""
        return "%s: done at step %s%s" % (w.name, w.done.get("step"), acc)
    return "%s: step %s" % (w.name, w.last_step if w.last_step is not None else "-")


def plot(run, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(4, 2, figsize=(14, 15), sharex=True)
    empty = []
    for ax, (title, ylabel, note, draw) in zip(axes.flat, PANELS):
        ax.set_title(title, fontsize=11)
        ax.set_ylabel(ylabel)
        ax.grid(True, color="#dddddd", lw=0.8)
        if draw(ax, run) == 0:
            ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center", color="#777777")
            empty.append((title, note))
    for ax in axes[-1]:
        ax.set_xlabel("training step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles = [plt.Line2D([], [], color=color(i), lw=2) for i in range(len(run.workers))]
    if handles:
        fig.legend(handles, [w.name for w in run.workers], loc="lower center", ncol=min(8, len(handles)))
    fig.suptitle("%s\n%s" % (run.name, "   ".join(status(w) for w in run.workers) or "no workers yet"),
                 fontsize=12)
    fig.tight_layout(rect=(0, 0.03, 1, 0.97))
    tmp = "%s.tmp.%d.png" % (png, os.getpid())
    try:
        fig.savefig(tmp, dpi=80)
        os.replace(tmp, png)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return empty


def main(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (config.yaml, worker-XXX/)")
    p.add_argument("-o", "--output", metavar="PNG", help="the picture to write (default: RUN_DIR/plots/run.png)")
    args = p.parse_args(argv[1:])
    try:
        run = read_run(args.run_dir)
    except NotARunDir as e:
        fail(str(e), 2)
    png = args.output or os.path.join(args.run_dir, "plots", "run.png")
    require("matplotlib", PROG, "Debian's python3-matplotlib; scripts/setup.sh installs it")
    for w in run.workers:
        if w.bad_lines:
            print("%s: %s: skipped %d line(s) that are not metrics events" % (PROG, w.metrics, w.bad_lines),
                  file=sys.stderr)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
        empty = plot(run, png)
    except OSError as e:
        fail("cannot write %s: %s" % (png, e.strerror or e), 1)
    for title, note in empty:
        print("%s: note: panel '%s' is empty: %s" % (PROG, title, note), file=sys.stderr)
    print("%s: wrote %s" % (PROG, png))


if __name__ == "__main__":
    main(sys.argv)
