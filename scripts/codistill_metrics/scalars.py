"""Every metrics event as named scalar series (the tags TensorBoard shows and the plot draws).

Tags (DESIGN.md section 7; a field that is null, a string or missing gives no point):
  train/<field>                  loss, ce, distill, lr, examples_per_s, teachers, staleness
  eval/<split>/<field>           loss, accuracy (split: `test`)
  eval/<split>/churn/worker-XXX  churn against the teacher from peer worker XXX
  checkpoint/<field>             bytes, write_ms, stall_ms
  teacher/worker-XXX/<field>     peer_step, load_ms of each teacher load from peer XXX
                                 (teacher/fixed-III/... and churn/fixed-III: fixed teacher III)
  done/<field>                   wall_s, accuracy, loss, train_examples_per_s, interrupted (0/1)
  <event>/<field>                any other event kind or numeric field, as it comes
`event`, `step` and `time` are the point's coordinates, not scalars.
"""

COORDINATES = ("event", "step", "time")


def number(v):
    """v as a float when it is a JSON number or boolean, else None (null, strings, objects)."""
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, (int, float)):
        return float(v)
    return None


def peer_name(peer):
    """Live peers are worker ids (teacher.peer) or their decimal text (churn keys); fixed
    teacher i is peer -(i+1) in teacher events and "fixed-i" in churn keys."""
    text = str(peer)
    if text.startswith("fixed-") and text[6:].isdigit():
        return "fixed-%03d" % int(text[6:])
    try:
        n = int(peer)
    except (TypeError, ValueError):
        return "worker-" + text
    return "worker-%03d" % n if n >= 0 else "fixed-%03d" % (-n - 1)


def tags_of_event(e):
    """[(tag, value)] of one event, in a fixed order."""
    kind = e["event"]
    prefix = kind
    if kind == "eval":
        prefix = "eval/" + str(e.get("split") or "test")
    elif kind == "teacher" and "peer" in e:
        prefix = "teacher/" + peer_name(e["peer"])
    out = []
    for field, v in e.items():
        if field in COORDINATES or (kind == "eval" and field == "split") or (kind == "teacher" and field == "peer"):
            continue
        if kind == "eval" and field == "churn" and isinstance(v, dict):
            for peer, c in sorted(v.items(), key=lambda kv: peer_name(kv[0])):
                if number(c) is not None:
                    out.append((prefix + "/churn/" + peer_name(peer), number(c)))
            continue
        if number(v) is not None:
            out.append((prefix + "/" + field, number(v)))
    return out


class Series:
    """One tag's points in step order. A step at or below the last one means the worker went
    back (it resumed from a checkpoint older than its last record, or re-recorded a step):
    the later record replaces the earlier from that step on, as TensorBoard does with a
    restarted run, so each step has one point."""

    def __init__(self, tag):
        self.tag = tag
        self.steps = []
        self.values = []
        self.times = []  # elapsed seconds of the worker (resumed segments laid end to end)

    def add(self, step, value, elapsed):
        if self.steps and step <= self.steps[-1]:
            keep = 0
            while keep < len(self.steps) and self.steps[keep] < step:
                keep += 1
            del self.steps[keep:], self.values[keep:], self.times[keep:]
        self.steps.append(step)
        self.values.append(value)
        self.times.append(elapsed)

    def __len__(self):
        return len(self.steps)
