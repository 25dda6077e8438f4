"""scripts/lib/check_function_length.py, the CI check of issue 35's "no function over 80
lines outside kernels/": the tree as it is passes, and a planted long function (C++, CUDA,
Python) fails it, named with its file and line, while one in kernels/, a build folder or a
virtual environment does not. Needs lizard, from .venv-tools (scripts/setup.sh --tools):
without it the test is skipped, or fails under CODISTILL_REQUIRE_TOOLS (CI)."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402

support.require_tools("lizard")

CHECK = os.path.join(support.SOURCE, "scripts", "lib", "check_function_length.py")


def run_check(source_dir):
    return subprocess.run([sys.executable, CHECK, source_dir], capture_output=True, text=True)


def cpp_function(name, lines):
    """A C++ function whose lizard length is lines (signature to closing brace)."""
    body = "".join("  x += %d;\n" % i for i in range(lines - 3))
    return "int %s() {\n  int x = 0;\n%s}\n" % (name, body)


def python_function(name, lines):
    body = "".join("    x += %d\n" % i for i in range(lines - 2))
    return "def %s():\n    x = 0\n%s" % (name, body)


class TheTree(unittest.TestCase):
    def test_the_tree_passes(self):
        r = run_check(support.SOURCE)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("no function over 80 lines outside kernels/", r.stdout)


class PlantedFunctions(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="fnlen-")

    def tearDown(self):
        shutil.rmtree(self.root)

    def plant(self, path, text):
        full = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)

    def test_80_lines_pass(self):
        self.plant("codistill/a.cpp", cpp_function("fits", 80))
        self.plant("scripts/a.py", python_function("fits", 80))
        r = run_check(self.root)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("(2 functions read)", r.stdout)

    def test_a_long_function_fails_in_each_language(self):
        self.plant("bench/b.cpp", "// a comment\n" + cpp_function("long_cpp", 81))
        self.plant("tests/b.cu", cpp_function("long_cu", 90))
        self.plant("scripts/b.py", "import os\n\n\n" + python_function("long_py", 100))
        r = run_check(self.root)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("bench/b.cpp:2: long_cpp is 81 lines (limit 80)", r.stdout)
        self.assertIn("tests/b.cu:1: long_cu is 90 lines", r.stdout)
        self.assertIn("scripts/b.py:4: long_py is 100 lines", r.stdout)
        self.assertIn("3 function(s) over 80 lines outside kernels/", r.stdout)

    def test_kernels_are_counted_for_information_only(self):
        self.plant("kernels/cuda/device/k.cuh", cpp_function("long_kernel", 120))
        r = run_check(self.root)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("kernels/ (exempt): 1 function(s) over 80 lines", r.stdout)
        self.assertIn("long_kernel (120)", r.stdout)

    def test_build_folders_venvs_and_third_party_are_not_read(self):
        for folder in ("build", "build-asan/_deps", ".venv-tools/lib", "tests/third_party"):
            self.plant(folder + "/gen.cpp", cpp_function("generated", 200))
        self.plant(".venv-bench/lib/site.py", python_function("installed", 200))
        r = run_check(self.root)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("(0 functions read)", r.stdout)


if __name__ == "__main__":
    unittest.main()
