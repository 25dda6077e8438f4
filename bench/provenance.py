"""Where a CPU benchmark's numbers come from, for its JSON: the commit of the tree it runs in
and the source folder and HEAD of a build folder. Shared by the summaries of
bench/run_loss_bench.sh and bench/run_train_bench.sh (which put bench/ on PYTHONPATH).
"""
import os
import subprocess


def git(*args, cwd=None):
    return subprocess.run(["git", *args], capture_output=True, text=True, cwd=cwd).stdout.strip()


def tree_commit(cwd=None):
    """HEAD of the tree at cwd (this folder by default), "-dirty" when tracked files changed."""
    dirty = git("status", "--porcelain", "--untracked-files=no", cwd=cwd)
    return git("rev-parse", "--short", "HEAD", cwd=cwd) + ("-dirty" if dirty else "")


def source_head(build_dir):
    """The source folder a CMake build was configured from and its git HEAD now (not
    necessarily the commit that was built, if the tree moved on since); None when the
    folder has no CMakeCache.txt."""
    try:
        src = next(l.split("=", 1)[1].strip() for l in open(os.path.join(build_dir, "CMakeCache.txt"))
                   if l.startswith("CMAKE_HOME_DIRECTORY:"))
    except (OSError, StopIteration):
        return None
    head = git("rev-parse", "--short", "HEAD", cwd=src)
    dirty = git("status", "--porcelain", "--untracked-files=no", cwd=src)
    return {"source": src, "head": head + ("-dirty" if dirty else "") if head else None}
