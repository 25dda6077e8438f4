"""scripts/plot_run.py on a real two-worker run: the picture is written where --help says,
every panel has data for a finished run, a run still going (a half-written last line, event
kinds not there yet, a worker without metrics) is drawn with notes, and what is not a run
directory is refused in one line with exit 2."""
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402
from codistill_metrics import read_run  # noqa: E402

PLOT = os.path.join(support.SCRIPTS, "plot_run.py")


def plot(*args):
    # As a user runs it: the script's own interpreter line (Debian's /usr/bin/python3).
    return support.run([PLOT] + list(args))


class PlotRun(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="test_plot_run.")
        cls.run_dir = support.train_run(cls.tmp.name)
        for w in (0, 1):  # the fixture must hold what the panels draw
            kinds = {e["event"] for e in support.events(cls.run_dir, w)}
            assert kinds >= set(support.KINDS), "worker %d has only %s" % (w, sorted(kinds))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def copy(self, name):
        dst = os.path.join(self.tmp.name, name)
        shutil.copytree(self.run_dir, dst, ignore=shutil.ignore_patterns("plots"))
        return dst

    def assertPicture(self, path):
        self.assertTrue(os.path.isfile(path), path)
        width, height = support.png_size(path)
        self.assertGreater(width, 500)
        self.assertGreater(height, 500)
        self.assertGreater(os.path.getsize(path), 20000)  # eight panels of lines, not a blank page
        self.assertEqual([f for f in os.listdir(os.path.dirname(path)) if ".tmp." in f], [])

    def test_finished_run_default_output_every_panel_drawn(self):
        r = plot(self.run_dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        png = os.path.join(self.run_dir, "plots", "run.png")
        self.assertIn("wrote " + png, r.stdout)
        self.assertPicture(png)
        self.assertNotIn("note:", r.stderr)  # a panel without data would be named here
        self.assertEqual(r.stderr, "")

    def test_help_names_the_default_output(self):
        r = plot("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("RUN_DIR/plots/run.png", r.stdout)

    def test_output_option_creates_its_folder(self):
        png = os.path.join(self.tmp.name, "elsewhere", "deep", "pair.png")
        r = plot(self.run_dir, "-o", png)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertPicture(png)

    def test_half_written_last_line_is_skipped(self):
        run_dir = self.copy("cut")
        whole = support.events(run_dir, 0)
        lost = support.cut_last_line(support.metrics_path(run_dir, 0))
        self.assertTrue(lost.startswith("{"))
        r = plot(run_dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertPicture(os.path.join(run_dir, "plots", "run.png"))
        self.assertNotIn("not metrics events", r.stderr)  # a partial last line is not damage
        w0 = read_run(run_dir).workers[0]
        self.assertEqual(w0.partial_lines, 1)
        self.assertEqual(w0.bad_lines, 0)
        self.assertEqual(sum(w0.kinds.values()), len(whole) - 1)

    def test_run_just_started_gives_empty_panels_with_notes(self):
        run_dir = self.copy("early")
        for w in (0, 1):  # only the first train events, as a few seconds into a run
            path = support.metrics_path(run_dir, w)
            with open(path) as f:  # what precedes the first train events (the memory plan), and three of them
                lines = f.readlines()
            third = [i for i, line in enumerate(lines) if '"event":"train"' in line][2]
            lines = lines[:third + 1]
            self.assertEqual(sum('"event":"train"' in line for line in lines), 3)
            with open(path, "w") as f:
                f.writelines(lines)
        os.remove(support.metrics_path(run_dir, 1))  # worker 1 has not written a line yet
        r = plot(run_dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertPicture(os.path.join(run_dir, "plots", "run.png"))
        for empty in ("Test loss", "Test accuracy", "Churn", "Teacher staleness", "Checkpoints"):
            self.assertRegex(r.stderr, "note: panel '%s[^']*' is empty" % empty)
        for drawn in ("Training loss", "Distillation term", "Throughput"):
            self.assertNotIn("panel '%s" % drawn, r.stderr)

    def test_damaged_line_is_skipped_and_said(self):
        run_dir = self.copy("damaged")
        path = support.metrics_path(run_dir, 1)
        with open(path) as f:
            lines = f.readlines()
        lines.insert(5, "not json at all\n")
        with open(path, "w") as f:
            f.writelines(lines)
        r = plot(run_dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("skipped 1 line(s) that are not metrics events", r.stderr)
        self.assertPicture(os.path.join(run_dir, "plots", "run.png"))

    def test_not_a_run_dir_is_refused_in_one_line(self):
        empty = os.path.join(self.tmp.name, "empty")
        os.makedirs(empty)
        a_file = os.path.join(self.tmp.name, "a-file")
        open(a_file, "w").close()
        for path, says in ((empty, "is not a run directory"), (os.path.join(self.tmp.name, "absent"), "does not exist"),
                           (a_file, "is not a folder")):
            r = plot(path)
            self.assertEqual(r.returncode, 2, path)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn(says, r.stderr)
            self.assertEqual(r.stdout, "")
        self.assertEqual(os.listdir(empty), [])  # nothing written into it


if __name__ == "__main__":
    support.main(PlotRun)
