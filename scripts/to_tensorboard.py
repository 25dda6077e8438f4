#!/usr/bin/python3
"""Writes a codistillation run's metrics as TensorBoard event files:

    scripts/to_tensorboard.py RUN_DIR LOGDIR [--force]
    tensorboard --logdir LOGDIR

One subdirectory per worker, LOGDIR/worker-XXX/, so that the workers show side by side (and
several runs, exported to LOGDIR/a, LOGDIR/b, ..., with `tensorboard --logdir LOGDIR`).
Every number of every metrics.jsonl event becomes a scalar at the event's step, tagged as
codistill_metrics/scalars.py lists: train/loss, train/distill, eval/test/accuracy,
eval/test/churn/worker-001, checkpoint/stall_ms, teacher/worker-001/peer_step, done/...
(null fields give no point; a worker that resumed behind its last record keeps its later
record from that step on; a last line still being written is skipped). Wall times are the
run's start (config.yaml's time) plus the worker's elapsed time.
Re-running replaces its own earlier output (LOGDIR/.codistill-tensorboard marks it); a
LOGDIR that holds anything else is refused unless --force, which replaces LOGDIR/worker-XXX/
and leaves the rest. Needs the `tensorboard` package (scripts/setup.sh --tools puts it in
.venv-tools/, which this script uses by itself when the interpreter running it lacks it).
Exit codes: 0 written; 1 cannot write or no tensorboard; 2 usage, RUN_DIR is not a run, or
LOGDIR holds other things.
"""
import argparse
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from codistill_metrics import NotARunDir, read_run  # noqa: E402
from codistill_metrics.interpreter import require  # noqa: E402
from codistill_metrics.reader import WORKER_DIR  # noqa: E402

PROG = "to_tensorboard.py"
MARKER = ".codistill-tensorboard"
EVENT_FILE = "events.out.tfevents."


def fail(msg, code):
    print("%s: %s" % (PROG, msg), file=sys.stderr)
    sys.exit(code)


STAGING = re.compile(r"^\.staging\.\d+$")  # what an export in progress (or killed) writes into


def ours(logdir, name, marked):
    """True for what an export leaves: the marker and worker folders of event files (when
    the marker is there), and staging folders."""
    path = os.path.join(logdir, name)
    if STAGING.match(name):
        return os.path.isdir(path) and not os.path.islink(path)
    if not marked:
        return False
    if name == MARKER:
        return os.path.isfile(path)
    if not (WORKER_DIR.match(name) and os.path.isdir(path)) or os.path.islink(path):
        return False
    return all(f.startswith(EVENT_FILE) and os.path.isfile(os.path.join(path, f)) for f in os.listdir(path))


def check_logdir(logdir, names, force):
    """The LOGDIR entries to remove before writing the worker folders names; exits 2 when
    LOGDIR holds other things and force is off."""
    if not os.path.exists(logdir):
        return []
    if not os.path.isdir(logdir):
        fail("%s exists and is not a folder" % logdir, 2)
    entries = sorted(os.listdir(logdir))
    marked = MARKER in entries
    foreign = [e for e in entries if not ours(logdir, e, marked)]
    if foreign and not force:
        fail("%s holds other things (%s%s); choose an empty or new LOGDIR, or --force to replace its "
             "worker-XXX/ folders" % (logdir, ", ".join(foreign[:3]), ", ..." if len(foreign) > 3 else ""), 2)
    return [e for e in entries if e != MARKER and (e not in foreign or e in names)]


def remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def write_worker(Writer, run, worker, path):
    """Writes one worker's scalars into the folder path; returns the number of points."""
    anchor = run.started
    if anchor is None:  # no config.yaml: count back from the file's last write
        last = max((s.times[-1] for s in worker.series.values() if len(s)), default=0.0)
        anchor = os.stat(worker.metrics).st_mtime - last if worker.has_metrics else 0.0
    # All points in step order, as a training loop would have written them: TensorBoard's
    # readers take a step going back as a restart and may drop the points after it.
    points = sorted((step, tag, value, elapsed) for tag, s in worker.series.items()
                    for step, value, elapsed in zip(s.steps, s.values, s.times))
    writer = Writer(path)
    try:
        for step, tag, value, elapsed in points:
            writer.add_scalar(tag, value, step, wall_time=anchor + elapsed)
    finally:
        writer.close()
    return len(points)


def main(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (config.yaml, worker-XXX/)")
    p.add_argument("logdir", metavar="LOGDIR", help="where the event files go (one worker-XXX/ each)")
    p.add_argument("--force", action="store_true", help="write into a LOGDIR that holds other things")
    args = p.parse_args(argv[1:])
    try:
        run = read_run(args.run_dir)
    except NotARunDir as e:
        fail(str(e), 2)
    logdir = os.path.abspath(args.logdir)
    if os.path.realpath(logdir) == os.path.realpath(args.run_dir):
        fail("LOGDIR must not be the run directory itself", 2)
    Writer = require("tensorboard.summary", PROG, "scripts/setup.sh --tools installs it in .venv-tools/").Writer
    for w in run.workers:
        if w.bad_lines:
            print("%s: %s: skipped %d line(s) that are not metrics events" % (PROG, w.metrics, w.bad_lines),
                  file=sys.stderr)
    stale = check_logdir(logdir, {w.name for w in run.workers}, args.force)

    # Everything is written beside LOGDIR's contents first, then swapped in, so a failure
    # leaves the earlier export as it was.
    staging = os.path.join(logdir, ".staging.%d" % os.getpid())
    try:
        os.makedirs(staging)
        counts = [(w, write_worker(Writer, run, w, os.path.join(staging, w.name))) for w in run.workers]
        for name in stale:
            remove(os.path.join(logdir, name))
        for w, _ in counts:
            os.rename(os.path.join(staging, w.name), os.path.join(logdir, w.name))
        with open(os.path.join(logdir, MARKER), "w") as f:
            json.dump({"written_by": "scripts/to_tensorboard.py", "run_dir": os.path.abspath(args.run_dir)}, f)
            f.write("\n")
    except OSError as e:
        fail("cannot write %s: %s" % (e.filename or logdir, e.strerror or e), 1)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for w, n in counts:
        note = "" if w.has_metrics else " (no metrics.jsonl yet)"
        print("%s: %s: %d points in %d tags%s" % (PROG, w.name, n, len(w.series), note))
    print("%s: wrote %s (view: tensorboard --logdir %s)" % (PROG, logdir, logdir))


if __name__ == "__main__":
    main(sys.argv)
