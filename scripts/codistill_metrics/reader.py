"""A run directory and its workers' metrics.jsonl, read while the run may still be going.

What a reader can meet, and what it does:
- a last line without its newline: a worker is writing it right now (or a copy was cut):
  skipped, counted in Worker.partial_lines;
- a whole line that is not a JSON object with `event` and `step`: skipped, counted in
  Worker.bad_lines (the trainer never writes one; a hand-edited or damaged file might);
- a worker folder with no metrics.jsonl yet (a worker just starting): a worker with no
  events.
"""
import json
import os
import re

from codistill_metrics.scalars import Series, tags_of_event

WORKER_DIR = re.compile(r"^worker-(\d{3,})$")  # as checkpoint/naming.cpp parses them


class NotARunDir(Exception):
    """RUN_DIR is missing, not a folder, or holds neither config.yaml nor worker-XXX/."""


class Worker:
    def __init__(self, wid, path):
        self.id = wid
        self.name = os.path.basename(path)
        self.path = path
        self.metrics = os.path.join(path, "metrics.jsonl")
        self.has_metrics = False
        self.series = {}        # tag -> Series (codistill_metrics.scalars)
        self.kinds = {}         # event kind -> number of events read
        self.last_step = None   # the highest step of any event
        self.done = None        # the last `done` event (dict), if any
        self.partial_lines = 0
        self.bad_lines = 0

    def add(self, event, elapsed):
        kind = event["event"]
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        step = event["step"]
        self.last_step = step if self.last_step is None else max(self.last_step, step)
        if kind == "done":
            self.done = event
        for tag, value in tags_of_event(event):
            self.series.setdefault(tag, Series(tag)).add(step, value, elapsed)


class Run:
    def __init__(self, path, workers, started):
        self.path = path
        self.name = os.path.basename(os.path.normpath(path))
        self.workers = workers
        # Seconds since the epoch when the run began (config.yaml is written once, at the
        # first worker's start); None when the run directory has no config.yaml.
        self.started = started


def worker_dirs(run_dir):
    """[(id, path)] of RUN_DIR's worker-XXX folders, by id; NotARunDir if it is no run."""
    if not os.path.exists(run_dir):
        raise NotARunDir("%s does not exist" % run_dir)
    if not os.path.isdir(run_dir):
        raise NotARunDir("%s is not a folder (expected a run directory)" % run_dir)
    found = []
    for name in os.listdir(run_dir):
        m = WORKER_DIR.match(name)
        path = os.path.join(run_dir, name)
        if m and os.path.isdir(path):
            found.append((int(m.group(1)), path))
    if not found and not os.path.isfile(os.path.join(run_dir, "config.yaml")):
        raise NotARunDir("%s is not a run directory (no config.yaml and no worker-XXX/ folder)" % run_dir)
    return sorted(found)


def read_lines(path):
    """(whole lines as text, True if a partial last line was left out)."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    partial = lines.pop() != b""  # text after the last newline is a line still being written
    return [line.decode("utf-8", "replace") for line in lines], partial


def parse_event(line):
    """The event dict, or None when the line is not a metrics event."""
    try:
        e = json.loads(line)
    except ValueError:
        return None
    if not isinstance(e, dict) or not isinstance(e.get("event"), str):
        return None
    step = e.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        return None
    return e


def read_worker(wid, path):
    w = Worker(wid, path)
    if not os.path.isfile(w.metrics):
        return w
    w.has_metrics = True
    lines, partial = read_lines(w.metrics)
    w.partial_lines = int(partial)
    # `time` counts from each process's start, so a resumed worker's clock starts again at
    # zero: its segments are laid end to end to keep elapsed time increasing.
    offset = last_time = 0.0
    for line in lines:
        if not line.strip():
            continue
        e = parse_event(line)
        if e is None:
            w.bad_lines += 1
            continue
        t = e.get("time")
        t = float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else last_time
        if t < last_time:
            offset += last_time
        last_time = t
        w.add(e, offset + t)
    return w


def read_run(run_dir):
    workers = [read_worker(wid, path) for wid, path in worker_dirs(run_dir)]
    config = os.path.join(run_dir, "config.yaml")
    started = os.stat(config).st_mtime if os.path.isfile(config) else None
    return Run(run_dir, workers, started)
