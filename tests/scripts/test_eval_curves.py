"""scripts/experiments/eval_curves.py, the helpers the experiment summaries share
(summarize_text.py, sync_vs_codistill.sh): the eval curve of a metrics.jsonl (a step
evaluated twice keeps its last value, other events are ignored), the step at which a curve
reaches a target loss (interpolated between the evaluations around it), and the spread."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402

sys.path.insert(0, os.path.join(support.SCRIPTS, "experiments"))
from eval_curves import curve, read_curve, sd, steps_to  # noqa: E402


class EvalCurves(unittest.TestCase):
    def test_curve_keeps_the_last_eval_of_a_step(self):
        events = [{"event": "train", "step": 100, "loss": 9.0},
                  {"event": "eval", "step": 200, "loss": 2.0},
                  {"event": "eval", "step": 100, "loss": 3.0},
                  {"event": "eval", "step": 200, "loss": 1.5}]  # a resumed run repeats its last eval
        self.assertEqual(curve(events), [(100, 3.0), (200, 1.5)])

    def test_read_curve_reads_metrics_jsonl(self):
        with tempfile.TemporaryDirectory(prefix="test_eval_curves.") as tmp:
            path = os.path.join(tmp, "metrics.jsonl")
            with open(path, "w") as f:
                for e in ({"event": "eval", "step": 10, "loss": 0.5}, {"event": "done", "step": 10},
                          {"event": "eval", "step": 5, "loss": 0.7}):
                    f.write(json.dumps(e) + "\n")
            self.assertEqual(read_curve(path), [(5, 0.7), (10, 0.5)])

    def test_steps_to_interpolates_between_evaluations(self):
        c = [(100, 1.0), (200, 0.6), (300, 0.4)]
        self.assertEqual(steps_to(c, 0.5), 250.0)  # halfway from 0.6 at 200 to 0.4 at 300
        self.assertEqual(steps_to(c, 0.8), 150.0)
        self.assertEqual(steps_to(c, 1.0), 100.0)  # reached at the first evaluation
        self.assertEqual(steps_to(c, 0.4), 300.0)
        self.assertIsNone(steps_to(c, 0.39))
        self.assertIsNone(steps_to([], 1.0))

    def test_steps_to_a_flat_stretch_is_its_step(self):
        # Equal losses around the crossing: no division by zero, the reaching step itself.
        self.assertEqual(steps_to([(100, 0.5), (200, 0.5)], 0.5), 100.0)
        self.assertEqual(steps_to([(100, 0.7), (200, 0.5), (300, 0.5)], 0.5), 200.0)

    def test_sd(self):
        self.assertEqual(sd([3.0]), 0.0)
        self.assertAlmostEqual(sd([1.0, 3.0]), 2 ** 0.5)


if __name__ == "__main__":
    support.main(EvalCurves)
