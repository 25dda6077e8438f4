#!/usr/bin/env python3
"""No function over 80 lines outside kernels/ (issue 35): a long function is where a reader
loses the thread, and a bench main or a TEST_CASE grows one step at a time without anyone
noticing. The length is lizard's: from the line of the function's name to its closing brace
(Python: to its last line), comments and blank lines included.

    python3 scripts/lib/check_function_length.py [SOURCE_DIR] [--limit N]

reads the C++, CUDA and Python sources under SOURCE_DIR (default: this repository), prints
one line per function over the limit outside kernels/ (file:line, its name, its length) and
exits 1 if there is any, 0 otherwise. Functions in kernels/ are counted and reported on one
line for information only: op code (a kernel body, a per-row loop) is allowed to be long.
Build folders, virtual environments and third-party code are skipped. Needs the `lizard`
package (.venv-tools, scripts/setup.sh --tools); exits 3 naming it where it is missing."""
import argparse
import os
import sys

LIMIT = 80
EXEMPT = "kernels"  # top-level folder, counted for information only
# C++ and CUDA go through lizard's C-like reader (it does not know .cu/.cuh by name).
CPP = (".cpp", ".hpp", ".h", ".cc", ".cu", ".cuh")
PYTHON = (".py",)
# Folders never read: build trees (.gitignore's build*/), virtual environments, git and
# caches anywhere; code that is not ours; and run products at the places .gitignore names
# (tests/data/ and codistill/data/ are sources, only the top data/ is not).
SKIPPED_PREFIXES = ("build", ".venv", "__pycache__")
SKIPPED_NAMES = {".git"}
THIRD_PARTY = {"third_party", "third-party", "thirdparty", "external", "_deps", "node_modules"}
RUN_PRODUCTS = {"runs", "data", "bundle", "bench/out", "bench/wheels"}


def skipped_folder(name, rel_parent):
    return (name.startswith(SKIPPED_PREFIXES) or name in SKIPPED_NAMES or name in THIRD_PARTY
            or os.path.join(rel_parent, name) in RUN_PRODUCTS)


def sources(root):
    """Repository-relative paths of the C++/CUDA/Python sources under root, sorted."""
    found = []
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        rel = "" if rel == "." else rel
        dirs[:] = sorted(d for d in dirs if not skipped_folder(d, rel))
        for f in files:
            if f.endswith(CPP + PYTHON):
                found.append(os.path.join(rel, f))
    return sorted(found)


def functions(lizard, root, path):
    """(name, start line, length) of each function of one source file."""
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        code = f.read()
    # lizard picks its reader by the file name's extension; CUDA is C++ to it.
    as_name = path + ".cpp" if path.endswith((".cu", ".cuh")) else path
    info = lizard.analyze_file.analyze_source_code(as_name, code)
    return [(fn.name, fn.start_line, fn.length) for fn in info.function_list]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source_dir", nargs="?",
                        default=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    parser.add_argument("--limit", type=int, default=LIMIT)
    args = parser.parse_args()
    try:
        import lizard
    except ImportError:
        print("check_function_length.py needs the Python package lizard (scripts/setup.sh --tools, "
              "then run it with .venv-tools/bin/python)", file=sys.stderr)
        return 3

    root = os.path.abspath(args.source_dir)
    long_ones, exempt_long, count = [], [], 0
    for path in sources(root):
        exempt = path.split(os.sep)[0] == EXEMPT
        for name, line, length in functions(lizard, root, path):
            count += 1
            if length > args.limit:
                (exempt_long if exempt else long_ones).append((path, line, name, length))
    for path, line, name, length in long_ones:
        print("%s:%d: %s is %d lines (limit %d)" % (path, line, name, length, args.limit))
    if exempt_long:
        print("for information, %s/ (exempt): %d function(s) over %d lines, the longest %s:%d %s (%d)"
              % (EXEMPT, len(exempt_long), args.limit, *max(exempt_long, key=lambda e: e[3])[:3],
                 max(e[3] for e in exempt_long)))
    if long_ones:
        print("%d function(s) over %d lines outside %s/: split them into named steps"
              % (len(long_ones), args.limit, EXEMPT))
        return 1
    print("no function over %d lines outside %s/ (%d functions read)" % (args.limit, EXEMPT, count))
    return 0


if __name__ == "__main__":
    sys.exit(main())
