"""Shared by the tests of scripts/: paths, the tools interpreter, and a real run trained by
this build's codistill-train (two codistilling workers on the synthetic task, a second or
so)."""
import json
import os
import signal
import subprocess
import sys
import time
import unittest

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("CODISTILL_BINARY_DIR") or os.path.join(SOURCE, "build")
SCRIPTS = os.path.join(SOURCE, "scripts")
sys.path.insert(0, SCRIPTS)

# 300 steps, every event kind: train every 10 steps, eval (with churn once a teacher is in
# use) and checkpoints every 50, teacher loads every 50 from step 50 on. Sync mode: each
# worker waits for its peer's checkpoints, so however fast one runs both have teachers (and
# the run is the same every time).
CONFIG = """run:
  seed: 7
  threads: 1
data:
  kind: synthetic
  batch_size: 64
  synthetic_train: 4096
  synthetic_test: 1024
  synthetic_shape: [1, 8, 8]
model:
  kind: mlp
  hidden: [64, 64]
optimizer:
  kind: sgd
  lr: 0.05
  momentum: 0.9
train:
  steps: 300
  eval_every: 50
  log_every: 10
checkpoint:
  every: 50
  keep: 3
codistill:
  enabled: true
  burn_in: 50
  reload_every: 50
  mode: sync
"""
KINDS = ("train", "eval", "checkpoint", "teacher", "done")


def tools_python():
    return os.environ.get("CODISTILL_TOOLS_PYTHON") or os.path.join(SOURCE, ".venv-tools", "bin", "python")


def require_tools(module="tensorboard"):
    """Continues in the tools environment (where `module` imports: tensorboard, tokenizers):
    re-runs this test under it when needed; where it is missing, exits 77 (CTest: skipped),
    or fails under CODISTILL_REQUIRE_TOOLS (scripts/run_tests.sh creates it, so there it
    must be)."""
    try:
        __import__(module)
        return
    except ImportError:
        pass
    python = tools_python()
    if os.access(python, os.X_OK) and not os.environ.get("CODISTILL_TEST_REEXEC"):
        os.environ["CODISTILL_TEST_REEXEC"] = "1"
        os.execv(python, [python] + sys.argv)
    if os.environ.get("CODISTILL_REQUIRE_TOOLS"):
        sys.exit("%s has no %s (scripts/setup.sh --tools) and CODISTILL_REQUIRE_TOOLS is set" % (python, module))
    print("skipped: no Python %s (%s; scripts/setup.sh --tools)" % (module, python))
    sys.exit(77)


def run(args, **kw):
    """Runs a command; returns the CompletedProcess with text stdout/stderr."""
    return subprocess.run(args, capture_output=True, text=True, **kw)


def _session_processes(sid):
    """ps lines (pid pgid sid stat etime time args) of the processes in session sid."""
    ps = subprocess.run(["ps", "-ww", "-eo", "pid,pgid,sid,stat,etime,time,args"], capture_output=True, text=True)
    return [line for line in ps.stdout.splitlines()[1:] if line.split()[2] == str(sid)]


def _kill_session(sid):
    """SIGKILLs every process of session sid until none is left (mpirun gives each rank a
    process group of its own, so killpg alone misses them; a rank forked meanwhile is caught
    by the next pass)."""
    try:
        os.killpg(sid, signal.SIGKILL)  # the leader's group: the script and mpirun
    except (ProcessLookupError, PermissionError):
        pass
    for _ in range(20):
        try:
            pids = [int(line.split()[0]) for line in _session_processes(sid)]
        except OSError:  # no ps: the process group above is what can be killed
            return
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.1)


def run_workers(args, run_dir, timeout, **kw):
    """run() of a command that starts workers into run_dir (launch_local.sh, mpirun), in a
    session of its own. If it outlasts timeout, an AssertionError says what each worker was
    doing (the session's processes, the tail of each stdout.txt and its last metrics events:
    a hang seen once in hundreds of runs must say where it was the first time; the report
    also goes to stderr at once, in case CTest ends the test before unittest prints it), and
    every process of the session is killed: mpirun and its ranks too, not only the script,
    so that no orphan holds a worker's directory or a core into the next test."""
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, **kw)
    try:
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(args, proc.returncode, out, err)
    except subprocess.TimeoutExpired:
        report = ["%s outlasted %d s; its processes and workers:" % (os.path.basename(args[0]), timeout)]
        try:
            report += _session_processes(proc.pid)
        except Exception as e:  # the report is a help; the cleanup below must happen
            report.append("(no process list: %r)" % e)
        report += worker_tails(run_dir)
        sys.stderr.write("\n".join(report) + "\n")
        sys.stderr.flush()
        raise AssertionError("\n".join(report)) from None
    finally:
        if proc.returncode is None:  # timed out, or interrupted
            _kill_session(proc.pid)
            proc.communicate(timeout=30)


def worker_tails(run_dir):
    """The tail of each worker's stdout.txt and metrics.jsonl under run_dir, as report lines:
    what a hung or failed launch was doing."""
    report = []
    try:
        for d in sorted(os.listdir(run_dir)) if os.path.isdir(run_dir) else []:
            for name, lines in (("stdout.txt", 15), ("metrics.jsonl", 4)):
                path = os.path.join(run_dir, d, name)
                if os.path.exists(path):
                    with open(path, errors="replace") as f:
                        tail = f.read().splitlines()[-lines:]
                    report += ["-- %s/%s (last %d lines)" % (d, name, lines)] + tail
    except Exception as e:
        report.append("(the report stopped: %r)" % e)
    return report


# Worker-group launches (launch_local.sh --ranks, sbatch) take a few seconds; a rare hang
# of one (seen about once in a thousand CI runs, never reproduced) must fail the test with
# what the workers were doing, well inside CTest's 300 s: the launch gives up after
# LAUNCH_TIMEOUT_S, and a rank or worker that waits for a peer gives up before that (exit 1,
# naming what it waited for) instead of after the defaults' 300 s and 600 s.
LAUNCH_TIMEOUT_S = 90
GROUP_GUARDS = ["--set", "group.timeout_s=30", "--set", "codistill.sync_timeout_s=30"]


def train_run(workdir, name="run", extra=()):
    """Trains the two-worker run into workdir/name through scripts/launch_local.sh."""
    config = os.path.join(workdir, "config-in.yaml")
    with open(config, "w") as f:
        f.write(CONFIG)
    run_dir = os.path.join(workdir, name)
    env = dict(os.environ, BUILD_DIR=BINARY)
    r = run([os.path.join(SCRIPTS, "launch_local.sh"), config, "2", "--run-dir", run_dir] + list(extra), env=env)
    if r.returncode != 0:
        raise AssertionError("launch_local.sh failed (%d):\n%s%s" % (r.returncode, r.stdout, r.stderr))
    return run_dir


def train_worker(run_dir, worker, extra=()):
    """Starts one worker of the run again (a resume) with the run's config."""
    r = run([os.path.join(BINARY, "trainer", "codistill-train"), "--config", os.path.join(run_dir, "config.yaml"),
             "--run-dir", run_dir, "--worker", str(worker), "--workers", "2"] + list(extra))
    if r.returncode != 0:
        raise AssertionError("codistill-train failed (%d):\n%s%s" % (r.returncode, r.stdout, r.stderr))
    return r


def metrics_path(run_dir, worker):
    return os.path.join(run_dir, "worker-%03d" % worker, "metrics.jsonl")


def events(run_dir, worker):
    """Every whole line of the worker's metrics.jsonl, parsed."""
    with open(metrics_path(run_dir, worker)) as f:
        text = f.read()
    whole = text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in whole.splitlines() if line.strip()]


def cut_last_line(path, keep_chars=17):
    """Leaves the file's last line half-written: its newline and all but keep_chars gone."""
    with open(path, "rb") as f:
        data = f.read()
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    with open(path, "wb") as f:
        f.write(data[: start + keep_chars])
    return data[start:].decode().strip()


def png_size(path):
    """(width, height) from a PNG's IHDR; AssertionError if it is not a PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise AssertionError("%s is not a PNG" % path)
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


# A tiny run for the launch tests (launch_local.sh groups, the Slurm cluster): 30 steps of
# an MLP on synthetic data, one thread per process, codistillation in sync mode from step
# 10 (so a run is the same every time, whoever launches it). A second or so per worker.
TINY_CONFIG = """run:
  seed: 5
  threads: 1
data:
  kind: synthetic
  batch_size: 16
  synthetic_train: 512
  synthetic_test: 128
  synthetic_shape: [1, 8, 8]
model:
  kind: mlp
  hidden: [16]
optimizer:
  kind: sgd
  lr: 0.05
train:
  steps: 30
  eval_every: 30
  log_every: 10
checkpoint:
  every: 10
  keep: 2
codistill:
  enabled: true
  burn_in: 10
  reload_every: 10
  mode: %s
"""


def write_tiny_config(workdir, mode="sync"):
    path = os.path.join(workdir, "tiny-%s.yaml" % mode)
    with open(path, "w") as f:
        f.write(TINY_CONFIG % mode)
    return path


def mpi_built():
    """Whether this build has the mpi process group (CMake passes CODISTILL_HAVE_MPI)."""
    return os.environ.get("CODISTILL_HAVE_MPI", "").upper() in ("ON", "1", "TRUE", "YES")


def hold_worker(run_dir, worker):
    """Makes worker's directory look owned by a live process of this host (this test), so
    that codistill-train refuses to start that worker (exit 2): a worker that fails."""
    import socket
    d = os.path.join(run_dir, "worker-%03d" % worker)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "owner"), "w") as f:
        json.dump({"host": socket.gethostname(), "pid": os.getpid(), "started_unix": 0}, f)
        f.write("\n")


def final_checkpoint(run_dir, worker, step):
    return os.path.join(run_dir, "worker-%03d" % worker, "ckpt-%09d.h5" % step)


def inspect(*args):
    return run([os.path.join(BINARY, "trainer", "codistill-inspect")] + list(args))


def parameter_distance(a, b):
    """The L2 distance between two checkpoints' parameters (codistill-inspect diff)."""
    r = inspect("diff", "--json", a, b)
    if r.returncode != 0:
        raise AssertionError("codistill-inspect diff failed (%d): %s" % (r.returncode, r.stderr))
    return max(p["l2"] for p in json.loads(r.stdout)["params"])


def group_env(env=None):
    """env (default os.environ) for runs of MPI groups: under the sanitized suite
    (ASAN_OPTIONS set) without LeakSanitizer, as tests/codistill/dist/test_process_group_mpi.cpp
    does: OpenMPI 4.1 does not free what MPI_Init allocated, and LSan would turn a rank's
    exit code into its own."""
    env = dict(os.environ if env is None else env)
    if env.get("ASAN_OPTIONS"):
        env["ASAN_OPTIONS"] += ":detect_leaks=0"
    return env


def main(*cases, required_by=None):
    """Runs the test classes and exits as CTest reads it: 1 on a failure; 77 (skipped, with
    a "skipped: REASON" line per reason) when any test was skipped, since a file whose
    tests partly skipped did not do all its work; 0 when every test ran and passed. Where
    the environment variable required_by is set, a skip fails instead."""
    suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(c) for c in cases)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    if not result.wasSuccessful():
        sys.exit(1)
    reasons = sorted({str(reason) for _, reason in result.skipped})
    if reasons and required_by and os.environ.get(required_by):
        sys.exit("%s is set, but tests skipped: %s" % (required_by, "; ".join(reasons)))
    for reason in reasons:
        print(reason if reason.startswith("skipped: ") else "skipped: " + reason)
    sys.exit(77 if reasons else 0)
