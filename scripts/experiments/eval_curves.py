"""Eval curves of a run's workers, shared by the experiment summaries (summarize_text.py and
sync_vs_codistill.sh's table): the held-out loss by step from metrics.jsonl, the step at which
a curve reaches a target loss, and the spread of a list of numbers.
"""
import json
import statistics as st


def curve(events):
    """[(step, loss)] of the eval events, sorted by step. A step evaluated twice keeps its
    last value (a resumed run repeats its last eval)."""
    by_step = {e["step"]: e["loss"] for e in events if e["event"] == "eval"}
    return sorted(by_step.items())


def read_curve(path):
    """curve() of one worker's metrics.jsonl."""
    with open(path) as f:
        return curve(map(json.loads, f))


def steps_to(c, target):
    """First step at which the eval curve c reaches target, linearly interpolated between
    the evaluation before and the one that reaches it; None if it never does."""
    prev = None
    for step, loss in c:
        if loss <= target:
            if prev is None or prev[1] == loss:
                return float(step)
            (s0, l0) = prev
            return s0 + (step - s0) * (l0 - target) / (l0 - loss)
        prev = (step, loss)
    return None


def sd(v):
    """Sample standard deviation, 0 for a single value (one seed)."""
    return st.stdev(v) if len(v) > 1 else 0.0
