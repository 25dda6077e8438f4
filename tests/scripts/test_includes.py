"""scripts/lib/check_includes.py, the CI check of the one-way ground (DESIGN.md section 2):
the tree as it is passes, and each kind of include it must refuse (one that climbs the
ladder, one sideways between two rooms of one rung, one into a private backend folder, a
source in a folder on no rung) fails it, naming the file, the line and the rooms. Standard
library only; needs no build."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402

CHECK = os.path.join(support.SOURCE, "scripts", "lib", "check_includes.py")


def run_check(source_dir):
    return subprocess.run([sys.executable, CHECK, source_dir], capture_output=True, text=True)


class TreeIsOneWay(unittest.TestCase):
    def test_the_tree_passes(self):
        r = run_check(support.SOURCE)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("the ground is one-way", r.stdout)


class RefusedIncludes(unittest.TestCase):
    """A small tree of rooms, one planted include at a time."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="includes-")
        for folder in ("kernels/cpu/image", "kernels/cuda/image", "codistill/util", "codistill/dist",
                       "codistill/optim", "codistill/models", "codistill/train", "trainer"):
            os.makedirs(os.path.join(self.root, folder))

    def tearDown(self):
        shutil.rmtree(self.root)

    def plant(self, path, *includes):
        with open(os.path.join(self.root, path), "w") as f:
            f.write("#pragma once\n// a comment line\n")
            for inc in includes:
                f.write('#include "%s"\n' % inc)

    def test_a_clean_tree_passes(self):
        self.plant("kernels/ops.hpp")
        self.plant("codistill/train/step.cpp", "codistill/train/step.hpp", "codistill/optim/sgd.hpp",
                   "kernels/ops.hpp", "codistill/util/rng.hpp")
        r = run_check(self.root)
        self.assertEqual(r.returncode, 0, r.stdout)

    def test_an_op_folder_is_part_of_its_backend(self):
        # kernels/cpu/image/ is in the room kernels/cpu: it and the backend's top include
        # each other's headers, and both may include kernels/.
        self.plant("kernels/cpu/image/conv2d.cpp", "kernels/cpu/impl.hpp", "kernels/ops.hpp")
        self.plant("kernels/cpu/queue.hpp", "kernels/cpu/image/conv2d.hpp")
        self.plant("kernels/cuda/image/pool.cu", "kernels/cuda/common.cuh", "kernels/cuda/image/conv2d.hpp")
        r = run_check(self.root)
        self.assertEqual(r.returncode, 0, r.stdout)

    def expect_refused(self, path, include, words):
        r = run_check(self.root)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("%s:3: includes %s" % (path, include), r.stdout)
        for w in words:
            self.assertIn(w, r.stdout)
        self.assertIn("1 include(s) break the one-way ground", r.stdout)

    def test_an_include_that_climbs_fails(self):
        self.plant("codistill/util/env.cpp", "codistill/dist/launch.hpp")
        self.expect_refused("codistill/util/env.cpp", "codistill/dist/launch.hpp",
                            ["climbs", "codistill/dist (rung 3) is above codistill/util (rung 2)"])

    def test_an_include_sideways_fails(self):
        self.plant("codistill/optim/optimizer.hpp", "codistill/models/model.hpp")
        self.expect_refused("codistill/optim/optimizer.hpp", "codistill/models/model.hpp", ["sideways"])

    def test_a_private_backend_header_fails(self):
        self.plant("codistill/train/setup.cpp", "kernels/cpu/impl.hpp")
        self.expect_refused("codistill/train/setup.cpp", "kernels/cpu/impl.hpp",
                            ["kernels/cpu is private to kernels"])
        os.remove(os.path.join(self.root, "codistill/train/setup.cpp"))
        self.plant("kernels/cuda/image/conv2d.hpp", "kernels/cpu/image/conv2d.hpp")
        self.expect_refused("kernels/cuda/image/conv2d.hpp", "kernels/cpu/image/conv2d.hpp",
                            ["kernels/cpu is private to kernels"])

    def test_a_folder_on_no_rung_fails(self):
        os.makedirs(os.path.join(self.root, "codistill/newroom"))
        self.plant("codistill/newroom/thing.cpp", "kernels/ops.hpp")
        self.expect_refused("codistill/newroom/thing.cpp", "kernels/ops.hpp", ["on no rung of the ladder"])


if __name__ == "__main__":
    support.main(TreeIsOneWay, RefusedIncludes)
