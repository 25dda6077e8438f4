"""scripts/launch_local.sh with worker groups: --ranks R (or RANKS=R) starts each of the N
workers as `mpirun -np R --oversubscribe` (plus --allow-run-as-root as root) of
codistill-train; R = 1 starts plain processes without mpirun; a failing worker is reported
by number while the others finish; bad --ranks values are usage errors (exit 2);
--first-worker F adds workers F.. to a run."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402

LAUNCH = os.path.join(support.SCRIPTS, "launch_local.sh")


def launch(args, **env):
    run_dir = args[args.index("--run-dir") + 1]
    return support.run_workers([LAUNCH] + list(args), run_dir, support.LAUNCH_TIMEOUT_S,
                               env=support.group_env(dict(os.environ, BUILD_DIR=support.BINARY, **env)))


def worker_text(run_dir, worker):
    with open(os.path.join(run_dir, "worker-%03d" % worker, "stdout.txt")) as f:
        return f.read()


def done(run_dir, worker):
    """The worker's last done event, or None."""
    last = [e for e in support.events(run_dir, worker) if e["event"] == "done"]
    return last[-1] if last else None


class LaunchLocalGroups(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="test_launch_local.")
        self.addCleanup(self.tmp.cleanup)
        self.config = support.write_tiny_config(self.tmp.name)

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    @unittest.skipUnless(support.mpi_built(), "this build has no MPI (CODISTILL_MPI=OFF)")
    def test_two_workers_of_two_ranks(self):
        run_dir = self.path("groups")
        r = launch(["--ranks", "2", self.config, "2", "--run-dir", run_dir] + support.GROUP_GUARDS)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("2 worker(s) x 2 ranks (mpirun)", r.stdout)
        for w in (0, 1):
            self.assertIn("worker %d: summary: steps 30" % w, r.stdout)
            # Rank 0 says it leads a group of 2: the ranks found each other through mpirun.
            self.assertIn("worker group: 2 ranks", worker_text(run_dir, w))
            d = done(run_dir, w)
            self.assertIsNotNone(d, "worker %d has no done event" % w)
            self.assertEqual((d["step"], d["interrupted"]), (30, False))
            ckpt = support.final_checkpoint(run_dir, w, 30)
            v = support.inspect("verify", ckpt)
            self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
            # A group's batch is R x data.batch_size: 30 steps x 16 x 2 examples.
            show = support.inspect("show", "--json", ckpt)
            self.assertEqual(show.returncode, 0, show.stderr)
            self.assertEqual(json.loads(show.stdout)["examples_seen"], 30 * 16 * 2)

    def test_one_rank_runs_without_mpirun(self):
        # MPIRUN names a program that always fails: R = 1 must not use it.
        run_dir = self.path("plain")
        r = launch([self.config, "2", "--run-dir", run_dir], MPIRUN="false")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("mpirun", r.stdout)
        for w in (0, 1):
            self.assertNotIn("worker group", worker_text(run_dir, w))
            self.assertEqual(done(run_dir, w)["step"], 30)

    def test_a_failing_worker_is_named_and_the_other_finishes(self):
        # RANKS from the environment; worker 1's directory is held by this test, so its
        # rank 0 refuses to start (exit 2), its mpirun fails; worker 0 (async mode: it does
        # not wait for its peer) finishes; its collectives give up after 30 s, inside the
        # launch's limit.
        if not support.mpi_built():
            self.skipTest("this build has no MPI (CODISTILL_MPI=OFF)")
        config = support.write_tiny_config(self.tmp.name, mode="async")
        run_dir = self.path("one-fails")
        support.hold_worker(run_dir, 1)
        r = launch([config, "2", "--run-dir", run_dir] + support.GROUP_GUARDS, RANKS="2")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("2 worker(s) x 2 ranks", r.stdout)
        self.assertIn("launch_local.sh: worker 1 failed (exit", r.stderr)
        self.assertIn("worker 0: summary: steps 30", r.stdout)
        self.assertNotIn("worker 0 failed", r.stderr)
        self.assertFalse(os.path.exists(support.metrics_path(run_dir, 1)))  # refused before training

    def test_first_worker_adds_workers_to_a_run(self):
        # The pair runs to its end; then --first-worker 2 starts worker 2 (--workers 3) in
        # the same run directory: the run takes it (run.workers is not the run's identity),
        # and joining from the peers' freshest checkpoint, already at train.steps, it has
        # nothing to do.
        config = support.write_tiny_config(self.tmp.name, mode="async")
        run_dir = self.path("grown")
        r = launch([config, "2", "--run-dir", run_dir])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = launch(["--first-worker", "2", config, "1", "--run-dir", run_dir, "--set", "model.init_from=peers"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("1 worker(s) (workers 2..2)", r.stdout)
        text = worker_text(run_dir, 2)
        self.assertIn("would join", text)
        self.assertIn("at step 30", text)
        self.assertIn("nothing to do", text)
        r = launch(["--first-worker", "x", config, "1", "--run-dir", self.path("never")])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--first-worker", r.stderr)

    def test_bad_ranks_are_usage_errors(self):
        for args, env in ((["--ranks", "0"], {}), (["--ranks", "two"], {}), ([], {"RANKS": "-1"}), (["--ranks"], {})):
            r = launch(args + [self.config, "2", "--run-dir", self.path("never")], **env)
            self.assertEqual(r.returncode, 2, (args, env, r.stderr))
            self.assertTrue("--ranks" in r.stderr or "usage" in r.stderr, r.stderr)
        r = launch(["--ranks", "2", self.config, "2", "--run-dir", self.path("never")], MPIRUN="no-such-mpirun")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("needs no-such-mpirun", r.stderr)
        self.assertFalse(os.path.exists(self.path("never")))


if __name__ == "__main__":
    support.main(LaunchLocalGroups)
