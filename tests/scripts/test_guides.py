"""The guides run (docs/guide/*.md): every ```sh (or ```bash) block of a guide is run, in the
guide's order, by one bash with `set -euo pipefail`, in a scratch directory that looks like
the repository root (scripts/, configs/ and .venv-tools/ link to this checkout's, build/ to
this build; BUILD_DIR is set too), so the commands read as a user types them there. A
command that fails fails the test, which prints the block, where it is in the guide and its
output; so does a block that leaves a process running after the guide's last block.
```text blocks (output, an example) and ```yaml / ```json / ```csv blocks are shown,
not run; a fence without a language, or one in another, fails the check below, so that no
command block escapes the test by its spelling.

Directives, HTML comments that the rendered guide does not show:
  <!-- guide-test: env NAME=VALUE ... -->  the environment of the guide's blocks: how the
      test makes them cheap (e.g. STEPS=60 where the guide says STEPS=${STEPS:-6000}). The
      guide's first lines say so in words.
  <!-- guide-test: skip REASON -->  on the line before a ```sh block: not run here (it needs
      a GPU, a cluster, starts a server that runs until stopped, installs packages...); the
      reason is printed.
  <!-- guide-test: needs WHAT... -->  the guide runs only where this machine has WHAT:
      `slurm` (Debian's slurm-wlm and munge, and root: what scripts/slurm/local_cluster.sh
      needs to start a one-node Slurm), `mpi` (a build with the MPI process group). Elsewhere
      its test is skipped, saying what is missing; under CODISTILL_REQUIRE_SLURM (as
      scripts/run_tests.sh sets it, like tests/scripts/test_slurm_cluster.py) a skip fails.
      A `slurm` guide's blocks see no SLURM_* variable of a job this test may run in, and
      CODISTILL_SLURM_OWNER_PID names the guide's shell, so that a cluster it leaves running
      (a block failed before the one that stops it) is stopped by local_cluster.sh's watcher.
Each guide is one test (test_guide_<name>); the other tests check the marking, the links and
the index (docs/guide/README.md), without running anything. Needs the tools environment
(.venv-tools: the export guide's torch, onnxruntime and safetensors; TensorBoard), entered
as tests/scripts/test_to_tensorboard.py does."""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402

support.require_tools()

GUIDE_DIR = os.path.join(support.SOURCE, "docs", "guide")
RUN = {"sh", "bash"}
SHOWN = {"text", "yaml", "json", "csv"}
GUIDE_TIMEOUT_S = 120  # a guide takes 10-25 s on 2 cores; a hang fails well inside CTest's 300 s
FENCE = re.compile(r"^(\s*)(```+)\s*([^\s`]*)\s*(.*)$")
DIRECTIVE = re.compile(r"^\s*<!--\s*guide-test:\s*(.*?)\s*-->\s*$")
MARK = "@@guide-block"
SLURM_TOOLS = ("munged", "mungekey", "slurmctld", "slurmd", "sinfo", "sbatch", "squeue", "scancel", "sbcast")


def missing_slurm():
    """Why scripts/slurm/local_cluster.sh could not start a cluster here, or None."""
    absent = [t for t in SLURM_TOOLS if not shutil.which(t) and not os.access("/usr/sbin/" + t, os.X_OK)]
    if absent:
        return "no Slurm (%s missing; scripts/setup.sh --slurm)" % ", ".join(absent)
    if os.geteuid() != 0:
        return "a local Slurm cluster needs root (slurmd runs jobs as their users)"
    return None


# What a guide may need (<!-- guide-test: needs ... -->): a function saying why it is
# missing here, or None.
NEEDS = {
    "slurm": missing_slurm,
    "mpi": lambda: None if support.mpi_built() else "this build has no MPI (CODISTILL_HAVE_MPI is not ON)",
}


class Block:
    def __init__(self, line, lang, text, skip=None):
        self.line, self.lang, self.text, self.skip = line, lang, text, skip


class Guide:
    """A guide's fenced blocks, its environment, and what is wrong with its marking."""

    def __init__(self, path):
        self.path, self.name = path, os.path.basename(path)
        self.blocks, self.env, self.needs, self.problems = [], {}, [], []
        with open(path) as f:
            lines = f.read().split("\n")
        skip, skip_line, i = None, 0, 0
        while i < len(lines):
            n, line = i + 1, lines[i]
            d = DIRECTIVE.match(line)
            if d:
                word, _, rest = d.group(1).partition(" ")
                if word == "env":
                    for item in shlex.split(rest):
                        key, eq, value = item.partition("=")
                        if not eq or not re.fullmatch(r"[A-Za-z_]\w*", key):
                            self.problems.append("line %d: env wants NAME=VALUE, got %r" % (n, item))
                        self.env[key] = value
                elif word == "needs":
                    for what in rest.split():
                        if what not in NEEDS:
                            self.problems.append("line %d: needs %r: valid are %s" % (n, what, ", ".join(sorted(NEEDS))))
                        self.needs.append(what)
                    if not rest.split():
                        self.problems.append("line %d: needs without what" % n)
                elif word == "skip":
                    if not rest.strip():
                        self.problems.append("line %d: skip without a reason" % n)
                    skip, skip_line = rest.strip() or "?", n
                else:
                    self.problems.append("line %d: unknown directive %r (valid: env, needs, skip)" % (n, word))
                i += 1
                continue
            m = FENCE.match(line)
            if not m:
                if skip is not None and line.strip():
                    self.problems.append("line %d: the skip of line %d is not followed by a block" % (n, skip_line))
                    skip = None
                i += 1
                continue
            indent, ticks, lang = m.group(1), m.group(2), m.group(3).lower()
            body, j = [], i + 1
            while j < len(lines) and not re.match(r"^\s*" + ticks + r"\s*$", lines[j]):
                body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
                j += 1
            if j == len(lines):
                self.problems.append("line %d: a block that is never closed" % n)
            if lang not in RUN | SHOWN:
                self.problems.append("line %d: a block in %r: mark it sh (run by the test) or text (output, not run)"
                                     % (n, lang or "no language"))
            if skip is not None and lang not in RUN:
                self.problems.append("line %d: skip before a %s block, which is never run anyway" % (skip_line, lang))
            self.blocks.append(Block(n, lang, "\n".join(body) + "\n", skip))
            skip, i = None, j + 1

    def runnable(self):
        return [b for b in self.blocks if b.lang in RUN]


def guide_paths():
    return sorted(os.path.join(GUIDE_DIR, f) for f in os.listdir(GUIDE_DIR)
                  if f.endswith(".md") and f != "README.md")


def tools_dir(work):
    """work/.venv-tools: this checkout's tools environment, as the guides name it."""
    python = support.tools_python()
    root = os.path.dirname(os.path.dirname(python))
    if os.path.exists(os.path.join(root, "pyvenv.cfg")):
        os.symlink(root, os.path.join(work, ".venv-tools"))
        return
    os.makedirs(os.path.join(work, ".venv-tools", "bin"))  # an interpreter outside a venv
    wrapper = os.path.join(work, ".venv-tools", "bin", "python")
    with open(wrapper, "w") as f:
        f.write('#!/bin/sh\nexec %s "$@"\n' % shlex.quote(python))
    os.chmod(wrapper, 0o755)


def run_guide(guide, tmp):
    """Runs the guide's blocks in tmp/work; returns (exit code or "timeout", [(block, output,
    seconds)] of the blocks that ran, the skipped blocks, whether the last block ended, and
    the working directory)."""
    work, blocks_dir = os.path.join(tmp, "work"), os.path.join(tmp, "blocks")
    os.makedirs(work)
    os.makedirs(blocks_dir)
    for name, target in (("scripts", support.SCRIPTS), ("configs", os.path.join(support.SOURCE, "configs")),
                         ("build", os.path.abspath(support.BINARY))):
        os.symlink(target, os.path.join(work, name))
    tools_dir(work)
    driver = ["set -euo pipefail"]
    if "slurm" in guide.needs:  # a cluster left running outlives this shell by a second at most
        driver.append("export CODISTILL_SLURM_OWNER_PID=$$")
    run, skipped = [], []
    for b in guide.runnable():
        if b.skip is not None:
            skipped.append(b)
            continue
        path = os.path.join(blocks_dir, "line-%04d.sh" % b.line)
        with open(path, "w") as f:
            f.write(b.text)
        driver.append("printf '\\n%s %d %%s\\n' \"$EPOCHREALTIME\"" % (MARK, len(run)))
        driver.append("source %s" % shlex.quote(path))
        run.append(b)
    driver.append("printf '\\n%s end %%s\\n' \"$EPOCHREALTIME\"" % MARK)
    env = dict(os.environ, BUILD_DIR=os.path.abspath(support.BINARY), **guide.env)
    if "slurm" in guide.needs:  # not the variables of a Slurm job this test may run in
        env = {k: v for k, v in env.items() if not k.startswith("SLURM_") and not k.startswith("SBATCH_")}
    proc = subprocess.Popen(["bash", "-c", "\n".join(driver) + "\n"], cwd=work, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                            start_new_session=True)
    start = time.time()
    try:
        out, _ = proc.communicate(timeout=GUIDE_TIMEOUT_S)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        support._kill_session(proc.pid)
        out, _ = proc.communicate(timeout=30)
        out += "\n(the guide outlasted %d s and was stopped)\n" % GUIDE_TIMEOUT_S
        rc = "timeout"
    finally:
        support._kill_session(proc.pid)  # nothing a block started in the background outlives it
    # Split the output at the markers: each block's output and its time.
    parts, current, stamp, text, ended = [], None, start, [], False
    for line in out.split("\n"):
        if line.startswith(MARK + " "):
            words = line.split()
            now = float(words[2].replace(",", ".")) if len(words) > 2 else time.time()
            if current is not None:
                parts.append((run[current], "\n".join(text), now - stamp))
            ended = words[1] == "end"
            current = None if ended else int(words[1])
            stamp, text = now, []
        else:
            text.append(line)
    if current is not None:  # the block that failed (or was stopped)
        parts.append((run[current], "\n".join(text), time.time() - stamp))
    elif text and "".join(text).strip():
        parts.append((None, "\n".join(text), 0.0))
    return rc, parts, skipped, ended, work


class Guides(unittest.TestCase):
    def test_blocks_are_marked(self):
        for path in guide_paths():
            g = Guide(path)
            self.assertEqual(g.problems, [], g.name)
            self.assertTrue(g.runnable(), "%s has no sh block to run" % g.name)

    def test_each_guide_says_how_it_is_tested(self):
        for path in guide_paths():
            with open(path) as f:
                head = "\n".join(f.read().split("\n")[:12])
            self.assertIn("tests/scripts/test_guides.py", head, "%s: its first lines say how it is tested" % path)

    def test_index_lists_every_guide(self):
        with open(os.path.join(GUIDE_DIR, "README.md")) as f:
            index = f.read()
        for path in guide_paths():
            self.assertIn("(%s)" % os.path.basename(path), index, "docs/guide/README.md does not link it")

    def test_links_resolve(self):
        """Every relative link names a file that exists, and a heading of it where it has #anchor."""
        link = re.compile(r"\]\(([^)\s#]*)(?:#([^)\s]*))?\)")
        for path in guide_paths() + [os.path.join(GUIDE_DIR, "README.md")]:
            with open(path) as f:
                text = f.read()
            for target, anchor in link.findall(text):
                if re.match(r"[a-z]+://", target):
                    continue
                file = os.path.join(GUIDE_DIR, target) if target else path
                where = "%s links %s#%s" % (os.path.basename(path), target, anchor)
                self.assertTrue(os.path.exists(file), where + ": no such file")
                if anchor:
                    self.assertIn(anchor, anchors(file), where + ": no such heading")


def anchors(path):
    """GitHub's anchors of a Markdown file's headings (fenced blocks left out)."""
    out, fenced = set(), False
    with open(path) as f:
        for line in f:
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif not fenced and re.match(r"#{1,6}\s", line):
                title = re.sub(r"^#+\s*", "", line).strip().lower()
                out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def make_test(path):
    def test(self):
        guide = Guide(path)
        self.assertEqual(guide.problems, [], guide.name)
        missing = [why for why in (NEEDS[what]() for what in guide.needs) if why]
        if missing:
            self.skipTest("%s: %s" % (guide.name, "; ".join(missing)))
        with tempfile.TemporaryDirectory(prefix="test_guides.") as tmp:
            rc, parts, skipped, ended, work = run_guide(guide, tmp)
            env = " ".join("%s=%s" % kv for kv in sorted(guide.env.items()))
            print("\n%s (%s): %d blocks run, %d not run" % (guide.name, env or "no env", len(parts), len(skipped)))
            for b, _, seconds in parts:
                if b is not None:
                    print("  line %4d  %6.1f s  %s" % (b.line, seconds, b.text.strip().split("\n")[0][:80]))
            for b in skipped:
                print("  line %4d  not run: %s" % (b.line, b.skip))
            if rc != 0:
                failed, output, _ = parts[-1] if parts else (None, "", 0)
                if ended:  # every block ran through; something they started held on
                    failed = None
                    report = ["%s: every block ended, but a process one of them left in the background still "
                              "ran after %d s (a guide must not leave processes running)" % (guide.name, GUIDE_TIMEOUT_S)]
                else:
                    report = ["%s: a block failed (exit %s)" % (guide.name, rc)]
                if failed is not None:
                    report += ["-- the block, %s line %d:" % (guide.name, failed.line), failed.text.rstrip()]
                tail = output.split("\n")[-150:]
                report += ["-- its output (last %d lines):" % len(tail)] + tail
                runs = os.path.join(work, "runs")
                if failed is not None and os.path.isdir(runs):
                    for d in sorted(os.listdir(runs)):
                        if "runs/" + d in failed.text:
                            report += support.worker_tails(os.path.join(runs, d))
                self.fail("\n".join(report))
    test.__doc__ = "docs/guide/%s: its sh blocks run" % os.path.basename(path)
    return test


for _path in guide_paths():
    setattr(Guides, "test_guide_" + re.sub(r"\W", "_", os.path.basename(_path)[:-3]), make_test(_path))


if __name__ == "__main__":
    # A guide that needs Slurm skips where there is none (CTest: the file skipped), unless
    # CODISTILL_REQUIRE_SLURM is set (scripts/run_tests.sh): then it fails.
    support.main(Guides, required_by="CODISTILL_REQUIRE_SLURM")
