"""scripts/to_tensorboard.py on a real two-worker run, one of whose workers resumed behind
its last record: TensorBoard's own reader (EventAccumulator) must find, per worker folder,
exactly the scalars of metrics.jsonl (every numeric field, its step, its value as the
float32 TensorBoard stores), the later record where a step was recorded twice; a rerun
replaces its own output; a LOGDIR holding other things is refused unless --force."""
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402

support.require_tools()
import numpy as np  # noqa: E402
from tensorboard.backend.event_processing import event_accumulator  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

EXPORT = os.path.join(support.SCRIPTS, "to_tensorboard.py")


def export(*args):
    # As a user runs it: Debian's interpreter, which moves to .venv-tools for tensorboard.
    return support.run([EXPORT] + list(args))


def expected_scalars(events):
    """{tag: [(step, value)]} written out from DESIGN.md section 7 independently of the
    script: a point at or below the tag's last step replaces the points from that step on."""
    out = {}

    def put(tag, step, v):
        if isinstance(v, bool):
            v = float(v)
        if not isinstance(v, (int, float)):
            return  # null, strings
        pts = out.setdefault(tag, [])
        while pts and pts[-1][0] >= step:
            pts.pop()
        pts.append((step, float(v)))

    for e in events:
        kind, step = e["event"], e["step"]
        for field, v in e.items():
            if field in ("event", "step", "time"):
                continue
            if kind == "eval":
                if field == "split":
                    continue
                if field == "churn":
                    for peer, c in v.items():
                        put("eval/%s/churn/worker-%03d" % (e["split"], int(peer)), step, c)
                    continue
                put("eval/%s/%s" % (e["split"], field), step, v)
            elif kind == "teacher":
                if field != "peer":
                    put("teacher/worker-%03d/%s" % (e["peer"], field), step, v)
            else:
                put("%s/%s" % (kind, field), step, v)
    return out


def read_logdir(folder):
    """{tag: [(step, float32 value, wall_time)]} as TensorBoard reads the folder."""
    acc = event_accumulator.EventAccumulator(folder, size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
    out = {}
    for tag in acc.Tags()["tensors"]:
        out[tag] = [(t.step, tensor_util.make_ndarray(t.tensor_proto), t.wall_time) for t in acc.Tensors(tag)]
        assert acc.SummaryMetadata(tag).plugin_data.plugin_name == "scalars", tag
    return out


class ToTensorBoard(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="test_to_tensorboard.")
        cls.run_dir = support.train_run(cls.tmp.name)
        # Worker 0 loses its newest checkpoint and is started again: it resumes at step 250
        # and records steps 260..300 a second time, with a clock that starts again at zero.
        os.remove(os.path.join(cls.run_dir, "worker-000", "ckpt-000000300.h5"))
        support.train_worker(cls.run_dir, 0)
        steps = [e["step"] for e in support.events(cls.run_dir, 0) if e["event"] == "train"]
        assert any(b <= a for a, b in zip(steps, steps[1:])), "worker 0 did not record a step twice: %s" % steps

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def logdir(self, name):
        return os.path.join(self.tmp.name, name)

    def assertMatchesRun(self, logdir, run_dir, workers=(0, 1)):
        self.assertEqual(sorted(os.listdir(logdir)), [".codistill-tensorboard"] + ["worker-%03d" % w for w in workers])
        started = os.stat(os.path.join(run_dir, "config.yaml")).st_mtime
        for w in workers:
            want = expected_scalars(support.events(run_dir, w))
            folder = os.path.join(logdir, "worker-%03d" % w)
            self.assertEqual(len([f for f in os.listdir(folder) if f.startswith("events.out.tfevents.")]), 1)
            got = read_logdir(folder)
            self.assertEqual(sorted(got), sorted(want), "tags of worker %d" % w)
            for tag, points in want.items():
                self.assertEqual([p[0] for p in got[tag]], [p[0] for p in points], "steps of %s, worker %d" % (tag, w))
                for (step, value), (_, stored, wall) in zip(points, got[tag]):
                    self.assertEqual(stored.dtype, np.float32)
                    # NaN never appears: the trainer writes a NaN as null, which gives no point.
                    self.assertEqual(stored, np.float32(value), "%s at step %d, worker %d" % (tag, step, w))
                    self.assertGreaterEqual(wall, started)
                walls = [p[2] for p in got[tag]]
                self.assertEqual(walls, sorted(walls), "wall times of %s, worker %d" % (tag, w))
        return got

    def test_scalars_and_steps_match_metrics_exactly(self):
        logdir = self.logdir("tb")
        r = export(self.run_dir, logdir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("wrote " + logdir, r.stdout)
        got = self.assertMatchesRun(logdir, self.run_dir)
        # What the plot draws is among them (tags named in DESIGN.md section 7's words).
        for tag in ("train/loss", "train/distill", "train/staleness", "train/examples_per_s", "eval/test/loss",
                    "eval/test/accuracy", "eval/test/churn/worker-000", "teacher/worker-000/peer_step",
                    "checkpoint/stall_ms", "done/accuracy"):
            self.assertIn(tag, got)
        self.assertEqual(got["train/loss"][-1][0], 300)

    def test_rerun_replaces_its_own_output(self):
        logdir = self.logdir("again")
        for _ in range(3):
            r = export(self.run_dir, logdir)
            self.assertEqual(r.returncode, 0, r.stderr)
        self.assertMatchesRun(logdir, self.run_dir)
        with open(os.path.join(logdir, ".codistill-tensorboard")) as f:
            self.assertEqual(json.load(f)["run_dir"], os.path.abspath(self.run_dir))

    def test_half_written_last_line_is_left_out(self):
        run_dir = os.path.join(self.tmp.name, "cut")
        shutil.copytree(self.run_dir, run_dir)
        lost = json.loads(support.cut_last_line(support.metrics_path(run_dir, 1)))
        self.assertEqual(lost["event"], "done")
        logdir = self.logdir("tb-cut")
        r = export(run_dir, logdir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")  # a line being written is no damage to report
        got = self.assertMatchesRun(logdir, run_dir)
        self.assertNotIn("done/accuracy", got)  # worker 1's last read, its done event cut

    def test_foreign_logdir_is_refused_unless_forced(self):
        logdir = self.logdir("shared")
        os.makedirs(os.path.join(logdir, "worker-000"))
        with open(os.path.join(logdir, "notes.txt"), "w") as f:
            f.write("mine\n")
        with open(os.path.join(logdir, "worker-000", "mine.txt"), "w") as f:
            f.write("mine too\n")
        r = export(self.run_dir, logdir)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("holds other things", r.stderr)
        self.assertEqual(sorted(os.listdir(logdir)), ["notes.txt", "worker-000"])  # untouched
        self.assertEqual(os.listdir(os.path.join(logdir, "worker-000")), ["mine.txt"])

        r = export(self.run_dir, logdir, "--force")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(logdir, "notes.txt")) as f:
            self.assertEqual(f.read(), "mine\n")  # the rest stays
        os.remove(os.path.join(logdir, "notes.txt"))
        self.assertMatchesRun(logdir, self.run_dir)  # worker-000/ replaced whole

    def test_export_of_an_earlier_export_is_not_foreign(self):
        # Our own output, whatever run it came from, is replaced without --force; one of its
        # worker folders holding something else makes it foreign again.
        logdir = self.logdir("reuse")
        self.assertEqual(export(self.run_dir, logdir).returncode, 0)
        open(os.path.join(logdir, "worker-001", "extra"), "w").close()
        r = export(self.run_dir, logdir)
        self.assertEqual(r.returncode, 2)
        self.assertIn("worker-001", r.stderr)

    def test_not_a_run_dir_is_refused_in_one_line(self):
        empty = self.logdir("not-a-run")
        os.makedirs(empty)
        r = export(empty, self.logdir("tb-none"))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("is not a run directory", r.stderr)
        self.assertFalse(os.path.exists(self.logdir("tb-none")))


class PeerNames(unittest.TestCase):
    """Tags name live peers by worker id and fixed teachers (peer -(i+1), churn key
    "fixed-i") by their index, so the two never share a tag."""

    def test_live_and_fixed_teachers(self):
        sys.path.insert(0, support.SCRIPTS)
        from codistill_metrics.scalars import peer_name, tags_of_event
        self.assertEqual(peer_name(1), "worker-001")
        self.assertEqual(peer_name("12"), "worker-012")
        self.assertEqual(peer_name(-1), "fixed-000")
        self.assertEqual(peer_name("fixed-2"), "fixed-002")
        tags = dict(tags_of_event({"event": "teacher", "step": 0, "peer": -2, "peer_step": 200,
                                   "load_ms": 3.0, "path": "/r/worker-001/ckpt-000000200.h5"}))
        self.assertEqual(tags, {"teacher/fixed-001/peer_step": 200.0, "teacher/fixed-001/load_ms": 3.0})
        tags = dict(tags_of_event({"event": "eval", "step": 5, "split": "test", "loss": 1.0,
                                   "churn": {"1": 0.25, "fixed-0": 0.5}}))
        self.assertEqual(tags["eval/test/churn/worker-001"], 0.25)
        self.assertEqual(tags["eval/test/churn/fixed-000"], 0.5)


if __name__ == "__main__":
    support.main(ToTensorBoard, PeerNames)
