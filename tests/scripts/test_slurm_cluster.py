"""A real one-node Slurm runs the project's sbatch script (issue 12): scripts/slurm/
local_cluster.sh starts munged, slurmctld and slurmd (Debian's slurm-wlm and munge) in a
temporary directory, and `sbatch --wait` submits scripts/slurm/codistill.sbatch:
- 2 workers x 2 ranks: each worker one `srun --ntasks=2 --mpi=pmix` job step, its two
  tasks one MPI group; both finish, their checkpoints verify, each trained as a group of 2,
  and they end bit-identical to the same run launched by launch_local.sh under mpirun;
- 2 workers x 1 rank: one-task steps that train without MPI (srun --mpi=none);
- a worker that fails is named and the job fails, while the other worker finishes.
The node has this machine's CPUs (2 here) and the jobs oversubscribe them (--overcommit).
The cluster is stopped on every exit path, and by its watcher if this test is killed.

Skipped (exit 77) where Slurm or munge is not installed or the caller is not root, unless
CODISTILL_REQUIRE_SLURM is set (scripts/run_tests.sh: there it must run)."""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402

CLUSTER = os.path.join(support.SCRIPTS, "slurm", "local_cluster.sh")
SBATCH_SCRIPT = os.path.join(support.SCRIPTS, "slurm", "codistill.sbatch")
# Each job takes ~10 s (most of it sbatch --wait polling); one that hangs fails its test
# with the job's state, the daemons' logs and the workers' tails, well inside CTest's 300 s.
JOB_TIMEOUT_S = 60


def running(pid):
    """The process exists and is not a zombie (an exited daemon waits for pid 1 to reap it)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            state = [line.split()[1] for line in f if line.startswith("State:")]
    except OSError:
        return False
    return bool(state) and state[0] not in ("Z", "X")


def clean_env(**extra):
    """This environment without the variables of a Slurm job we may be running in (they
    would leak into the test cluster's jobs), plus extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(extra)
    return env


class SlurmCluster(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="test_slurm.")
        cls.cluster = os.path.join(cls.tmp.name, "cluster")
        cls.env = clean_env(SLURM_CONF=os.path.join(cls.cluster, "slurm.conf"),
                            PATH=os.environ.get("PATH", "") + ":/usr/sbin",
                            CODISTILL_ROOT=support.SOURCE,
                            CODISTILL_TRAIN=os.path.join(support.BINARY, "trainer", "codistill-train"))
        r = support.run([CLUSTER, "start", cls.cluster], timeout=120,
                        env=dict(cls.env, CODISTILL_SLURM_OWNER_PID=str(os.getpid())))
        if r.returncode != 0:
            support.run([CLUSTER, "stop", cls.cluster], env=cls.env)
            cls.tmp.cleanup()
            raise unittest.SkipTest(r.stdout.strip()) if r.returncode == 77 else AssertionError(
                "local_cluster.sh start failed (%d):\n%s%s" % (r.returncode, r.stdout, r.stderr))

    @classmethod
    def tearDownClass(cls):
        support.run([CLUSTER, "stop", cls.cluster], env=cls.env, timeout=60)
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def submit(self, name, ntasks, script_args, **env):
        """sbatch --wait of the project's script; (exit code, the job's output file)."""
        out = self.path(name + ".out")
        cmd = ["sbatch", "--wait", "--ntasks=%d" % ntasks, "--cpus-per-task=1", "--overcommit",
               "--time=5", "--job-name=" + name, "--output=" + out, SBATCH_SCRIPT] + script_args
        try:
            # The job's tasks inherit this environment (sbatch --export=ALL).
            r = support.run(cmd, cwd=self.tmp.name, env=support.group_env(dict(self.env, **env)), timeout=JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            report = ["job %s did not end within %d s; squeue:" % (name, JOB_TIMEOUT_S),
                      support.run(["squeue"], env=self.env).stdout]
            for log in (out, os.path.join(self.cluster, "slurmctld.log"), os.path.join(self.cluster, "slurmd.log")):
                if os.path.exists(log):
                    with open(log, errors="replace") as f:
                        report += ["-- %s (last 20 lines)" % log] + f.read().splitlines()[-20:]
            run_dir = script_args[-1]
            report += support.worker_tails(run_dir)
            sys.stderr.write("\n".join(report) + "\n")
            support.run(["scancel", "--name=" + name], env=self.env)
            raise AssertionError("\n".join(report)) from None
        text = open(out).read() if os.path.exists(out) else ""
        return r.returncode, text + r.stderr

    def worker_text(self, run_dir, worker):
        with open(os.path.join(run_dir, "worker-%03d" % worker, "stdout.txt")) as f:
            return f.read()

    def assert_finished(self, run_dir, worker, steps=30):
        events = [e for e in support.events(run_dir, worker) if e["event"] == "done"]
        self.assertTrue(events, "worker %d has no done event" % worker)
        self.assertEqual((events[-1]["step"], events[-1]["interrupted"]), (steps, False))
        ckpts = sorted(os.path.join(run_dir, "worker-%03d" % worker, f)
                       for f in os.listdir(os.path.join(run_dir, "worker-%03d" % worker)) if f.startswith("ckpt-"))
        self.assertIn(support.final_checkpoint(run_dir, worker, steps), ckpts)
        v = support.inspect("verify", *ckpts)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

    @unittest.skipUnless(support.mpi_built(), "this build has no MPI (CODISTILL_MPI=OFF)")
    def test_two_workers_of_two_ranks_each_a_job_step(self):
        config = support.write_tiny_config(self.tmp.name)
        run_dir = self.path("groups")
        rc, out = self.submit("groups", 4, ["--ranks", "2", config, run_dir])
        self.assertEqual(rc, 0, out)
        self.assertIn("2 worker(s) x 2 rank(s)", out)
        self.assertIn("all 2 worker(s) finished", out)
        for w in (0, 1):
            text = self.worker_text(run_dir, w)
            # The header of rank 0 in job step w (SLURM_STEP_ID: codistill saw a job step),
            # and rank 0 leading an MPI group of 2 (the ranks met through PMIx).
            self.assertRegex(text, r"=== .* job \d+ step \d+ restart 0 on .*: worker %d of 2, 2 rank\(s\)" % w)
            self.assertIn("worker group: 2 ranks (mpi process group)", text)
            self.assertIn("worker %d: summary: steps 30" % w, out)
            self.assert_finished(run_dir, w)
            show = support.inspect("show", "--json", support.final_checkpoint(run_dir, w, 30))
            self.assertEqual(json.loads(show.stdout)["examples_seen"], 30 * 16 * 2)
        # The same run under mpirun (launch_local.sh): sync mode makes it the same run, so
        # srun's groups must end bit-identical to mpirun's.
        local = self.path("groups-mpirun")
        r = support.run_workers([os.path.join(support.SCRIPTS, "launch_local.sh"), "--ranks", "2", config, "2",
                                 "--run-dir", local] + support.GROUP_GUARDS, local, support.LAUNCH_TIMEOUT_S,
                                env=support.group_env(dict(os.environ, BUILD_DIR=support.BINARY)))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for w in (0, 1):
            self.assertEqual(support.parameter_distance(support.final_checkpoint(run_dir, w, 30),
                                                        support.final_checkpoint(local, w, 30)), 0.0)

    def test_one_rank_workers_train_without_mpi(self):
        config = support.write_tiny_config(self.tmp.name)
        run_dir = self.path("plain")
        rc, out = self.submit("plain", 2, [config, run_dir])
        self.assertEqual(rc, 0, out)
        self.assertIn("2 worker(s) x 1 rank(s)", out)
        for w in (0, 1):
            text = self.worker_text(run_dir, w)
            self.assertIn("worker %d of 2, 1 rank(s)" % w, text)
            self.assertNotIn("worker group", text)  # the identity group: no MPI
            self.assert_finished(run_dir, w)

    def test_a_second_job_adds_workers_to_the_run(self):
        # --first-worker 2: the job's one task is worker 2 of 3, in the same run directory.
        # Joining from the peers' freshest checkpoint, already at train.steps, it has
        # nothing to do; the job counts it finished.
        config = support.write_tiny_config(self.tmp.name, mode="async")
        run_dir = self.path("grown")
        rc, out = self.submit("pair", 2, [config, run_dir])
        self.assertEqual(rc, 0, out)
        rc, out = self.submit("third", 1, ["--first-worker", "2", config, run_dir, "--set", "model.init_from=peers"])
        self.assertEqual(rc, 0, out)
        text = self.worker_text(run_dir, 2)
        self.assertIn("worker 2 of 3, 1 rank(s)", text)
        self.assertIn("nothing to do", text)

    def test_a_failing_worker_fails_the_job_and_is_named(self):
        # Worker 1's directory is held by this test: it refuses to start (exit 2). Async
        # mode: worker 0 does not wait for it and finishes.
        config = support.write_tiny_config(self.tmp.name, mode="async")
        run_dir = self.path("one-fails")
        support.hold_worker(run_dir, 1)
        rc, out = self.submit("one-fails", 2, [config, run_dir])
        self.assertNotEqual(rc, 0, out)
        self.assertIn("codistill.sbatch: worker 1 failed (srun exit 2)", out)
        self.assertIn("worker(s) 1 failed", out)
        self.assertNotIn("worker 0 failed", out)
        self.assert_finished(run_dir, 0)

    def test_tasks_not_a_multiple_of_ranks_is_refused(self):
        config = support.write_tiny_config(self.tmp.name)
        rc, out = self.submit("odd", 3, ["--ranks", "2", config, self.path("odd")])
        self.assertEqual(rc, 2, out)
        self.assertIn("not a multiple of 2 rank(s) per worker", out)

    def test_a_cluster_whose_owner_dies_is_stopped_by_its_watcher(self):
        # What happens to the cluster above if CTest kills this test (SIGKILL, no clean-up):
        # a second cluster, owned by a process that is then killed.
        owner = subprocess.Popen(["sleep", "600"])
        watched = self.path("watched")
        try:
            r = support.run([CLUSTER, "start", watched], timeout=120,
                            env=dict(self.env, CODISTILL_SLURM_OWNER_PID=str(owner.pid)))
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            pids = {}
            for name in ("munged", "slurmctld", "slurmd", "watcher"):
                with open(os.path.join(watched, name + ".pid")) as f:
                    pids[name] = int(f.read())
            self.assertEqual([n for n, p in pids.items() if not running(p)], [])
            owner.kill()
            owner.wait()
            deadline = time.monotonic() + 60  # a hang guard, far beyond the ~1 s it takes
            while any(running(p) for p in pids.values()) and time.monotonic() < deadline:
                time.sleep(0.2)
            self.assertEqual([n for n, p in pids.items() if running(p)], [])
            self.assertEqual([f for f in os.listdir(watched) if f.endswith(".pid")], [])
        finally:
            owner.kill()
            owner.wait()
            support.run([CLUSTER, "stop", watched], env=self.env, timeout=60)


if __name__ == "__main__":
    # Where Slurm cannot run here (setUpClass says why), or a test skips: exit 77 (CTest:
    # skipped), unless CODISTILL_REQUIRE_SLURM is set (scripts/run_tests.sh): then it fails.
    support.main(SlurmCluster, required_by="CODISTILL_REQUIRE_SLURM")
