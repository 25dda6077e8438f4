#!/usr/bin/env python3
"""Teachers' memory per node with and without codistill.share_teachers (issue 37).

A worker group of 2 ranks (mpirun -np 2) on this node learns from one peer teacher of a
GPT-2-124M-shaped model (V 50304, D 768, 12 blocks, tied head) held as bf16 weights
(codistill.teacher_weights: bf16), in three runs: codistill off (no teacher), share_teachers
off (each rank its own copy), share_teachers auto (one file in /dev/shm, both ranks map it).
Every 0.25 s it sums the ranks' PSS (/proc/<pid>/smaps_rollup: shared pages counted once
across the ranks) and, with sharing, the PSS of the shared file's mappings (/proc/<pid>/smaps).
The teachers' memory per node is a run's PSS sum minus the no-teacher run's, over the steps
after the teacher was adopted (median). Raw samples and a summary go to stdout.

usage: teacher_sharing_pss.py BUILD_DIR WORK_DIR [MPIRUN]
"""
import array, os, random, re, statistics, subprocess, sys, time

build, work = sys.argv[1], sys.argv[2]
mpirun = sys.argv[3] if len(sys.argv) > 3 else "mpirun"
train = os.path.join(build, "trainer", "codistill-train")
os.makedirs(work, exist_ok=True)

CONFIG = """run:
  seed: 1
  threads: 1
  workers: 2
group:
  timeout_s: 600
data:
  kind: tokens
  path: {work}/data
  train: train.bin
  valid: val.bin
  context: 64
  batch_size: 1
  test_limit: 2
  shard: full
model:
  kind: gpt
  vocab_size: 50304
  seq_len: 64
  d_model: 768
  heads: 12
  blocks: 12
  mlp_ratio: 4
  dropout: 0.0
  tie_embeddings: true
  gelu: tanh
  attention: flash
optimizer:
  kind: sgd
  lr: 0.0001
train:
  steps: {steps}
  eval_every: 0
  log_every: 1
  fused_head: true
checkpoint:
  every: 2
  keep: 2
codistill:
  enabled: true
  mode: async
  burn_in: 0
  reload_every: 2
  teacher_precision: bf16
  teacher_weights: bf16
"""


def shard(path, n, seed):
    """An llm.c token shard (version 1: uint16 tokens) of n random GPT-2 token ids."""
    rng = random.Random(seed)
    header = array.array("i", [20240520, 1, n] + [0] * 253)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(array.array("H", (rng.randrange(50257) for _ in range(n))).tobytes())


def rank_pids(root):
    """The rank processes below mpirun (their command is codistill-train)."""
    kids, out = {}, []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            kids.setdefault(ppid, []).append(int(p))
        except (OSError, IndexError, ValueError):
            pass
    todo = [root]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            todo.append(c)
            try:
                if os.path.basename(os.readlink(f"/proc/{c}/exe")) == "codistill-train":
                    out.append(c)
            except OSError:
                pass
    return sorted(out)


def pss_kb(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return int(re.search(r"^Pss:\s+(\d+) kB", f.read(), re.M).group(1))


def shared_file_pss_kb(pid):
    """PSS of this process's mappings of codistill-teacher.* files."""
    total, inside = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                inside = "codistill-teacher." in line
            elif inside and line.startswith("Pss:"):
                total += int(line.split()[1])
    return total


def run(name, extra):
    run_dir = os.path.join(work, name)
    os.makedirs(os.path.join(run_dir, "worker-001"), exist_ok=True)
    for f in os.listdir(os.path.join(work, "peer", "worker-001")):
        if f.startswith("ckpt-"):
            dst = os.path.join(run_dir, "worker-001", f)
            if not os.path.exists(dst):
                os.link(os.path.join(work, "peer", "worker-001", f), dst)
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []  # CI machines run as root
    cmd = [mpirun] + root + ["--oversubscribe", "-np", "2", train, "--config", os.path.join(work, "c.yaml"),
           "--run-dir", run_dir, "--worker", "0", "--set", "data.batch_size=1",
           # Rank 0's own checkpoints and the gate's probes move its PSS by gigabytes: off,
           # so that what differs between the runs is the teachers.
           "--set", "checkpoint.every=1000", "--set", "codistill.gate.enabled=false"] + extra
    out = open(os.path.join(work, name + ".out"), "w")
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    samples = []  # (t, [pss of each rank], shared-file pss, step logged so far)
    while proc.poll() is None:
        time.sleep(0.25)
        pids = rank_pids(proc.pid)
        try:
            pss = [pss_kb(p) for p in pids]
            shm = sum(shared_file_pss_kb(p) for p in pids)
        except (OSError, AttributeError):
            continue
        log = open(os.path.join(work, name + ".out")).read()
        steps = re.findall(r"train step\s+(\d+)/", log)
        taught = "teacher: peer 1 at step" in log
        samples.append((time.time() - t0, pss, shm, int(steps[-1]) if steps else 0, taught))
    out.close()
    if proc.returncode != 0:
        sys.exit(f"{name}: exit {proc.returncode}; see {work}/{name}.out")
    return samples


def main():
    os.makedirs(os.path.join(work, "data"), exist_ok=True)
    shard(os.path.join(work, "data", "train.bin"), 1 << 20, 1)
    shard(os.path.join(work, "data", "val.bin"), 1 << 12, 2)
    with open(os.path.join(work, "c.yaml"), "w") as f:
        f.write(CONFIG.format(work=work, steps=10))
    peer = subprocess.run([train, "--config", os.path.join(work, "c.yaml"), "--run-dir", os.path.join(work, "peer"),
                           "--worker", "1", "--set", "codistill.enabled=false", "--set", "train.steps=2"],
                          capture_output=True, text=True)
    if peer.returncode != 0:
        sys.exit("peer run failed:\n" + peer.stdout + peer.stderr)
    shm_dir = os.path.join("/dev/shm")
    runs = [("no_teacher", ["--set", "codistill.enabled=false"]),
            ("share_off", ["--set", "codistill.share_teachers=off"]),
            ("share_auto", ["--set", "codistill.share_dir=" + shm_dir])]
    summary = {}
    for name, extra in runs:
        samples = run(name, extra)
        print(f"== {name}: t_s, pss_kb per rank, pss sum kB, shared-file pss kB, last step logged, teacher adopted")
        for t, pss, shm, step, taught in samples:
            print(f"{t:7.2f} {' '.join(str(p) for p in pss)} {sum(pss)} {shm} {step} {int(taught)}")
        # The steps after the teacher came (the no-teacher run: the same steps, 4 on).
        steady = [s for s in samples if len(s[1]) == 2 and s[3] >= 5 and (s[4] or name == "no_teacher")]
        med = [statistics.median(s[1][r] for s in steady) if steady else float("nan") for r in (0, 1)]
        summary[name] = (med, max(sum(s[1]) for s in samples if len(s[1]) == 2),
                         statistics.median(s[2] for s in steady) if steady else 0, len(steady))
        print(open(os.path.join(work, name + ".out")).read().count("teacher sharing"), "teacher-sharing log lines")
        for line in open(os.path.join(work, name + ".out")):
            if "teacher sharing" in line or "teacher: peer" in line:
                print("   log:", line.rstrip())
    base = sum(summary["no_teacher"][0])
    print("== summary, MiB: each rank's PSS median over the steps with the teacher (no_teacher: steps 5 on),")
    print("   per node = the two summed; teachers per node = per node minus no_teacher's; shm = PSS of the file's mappings")
    print(f"{'run':<12} {'rank 0':>8} {'rank 1':>8} {'per node':>9} {'teachers':>9} {'shm':>7} {'max sum':>8} {'samples':>8}")
    for name, (med, mx, shm, n) in summary.items():
        print(f"{name:<12} {med[0] / 1024:8.1f} {med[1] / 1024:8.1f} {sum(med) / 1024:9.1f} {(sum(med) - base) / 1024:9.1f}"
              f" {shm / 1024:7.1f} {mx / 1024:8.1f} {n:8d}")


main()
