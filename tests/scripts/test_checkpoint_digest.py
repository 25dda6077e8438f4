"""scripts/checkpoint_digest.py recomputes, with h5py and the xxhash package, the content
digest that the C++ writer stored: XXH3-64 for the checkpoints of a run trained now,
XXH64 for a file written before XXH3 (no content_digest_algorithm attribute). One changed
parameter value (rewritten through HDF5, so its fletcher32 stays valid) is a mismatch."""
import glob
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402

import h5py  # noqa: E402

SCRIPT = os.path.join(support.SCRIPTS, "checkpoint_digest.py")
OLD_FILE = os.path.join(support.SOURCE, "tests", "checkpoint", "data", "v1-no-buffers-2130dbf.h5")


class CheckpointDigest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="codistill-digest-")
        cls.run_dir = support.train_run(cls.tmp)
        cls.files = sorted(glob.glob(os.path.join(cls.run_dir, "worker-*", "ckpt-*.h5")))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_new_checkpoints_are_xxh3_and_match(self):
        self.assertGreaterEqual(len(self.files), 4)
        r = support.run([SCRIPT] + self.files)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), len(self.files))
        for line in lines:
            self.assertIn(": xxh3-64 stored ", line)
            stored, computed = line.split(" stored ")[1].split(" computed ")
            self.assertEqual(stored, computed)
            self.assertEqual(len(stored), 16)

    def test_old_xxh64_file_matches(self):
        r = support.run([SCRIPT, OLD_FILE])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(": xxh64 stored 19383797e55ec68b computed 19383797e55ec68b", r.stdout)

    def test_a_changed_value_is_a_mismatch(self):
        damaged = os.path.join(self.tmp, "damaged.h5")
        shutil.copy(self.files[-1], damaged)
        with h5py.File(damaged, "r+", locking=False) as f:
            w = f["params/fc1/weight"]
            w[0, 0] = w[0, 0] + 1.0
        r = support.run([SCRIPT, self.files[0], damaged])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("MISMATCH", r.stdout.splitlines()[1])
        self.assertNotIn("MISMATCH", r.stdout.splitlines()[0])
        # The C++ reader agrees.
        inspect = os.path.join(support.BINARY, "trainer", "codistill-inspect")
        v = support.run([inspect, "verify", damaged])
        self.assertNotEqual(v.returncode, 0)
        self.assertIn("content digest mismatch", v.stdout + v.stderr)

    def test_not_a_checkpoint(self):
        junk = os.path.join(self.tmp, "junk.h5")
        with open(junk, "wb") as f:
            f.write(b"not hdf5")
        r = support.run([SCRIPT, junk])
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot check", r.stderr)


if __name__ == "__main__":
    support.main(CheckpointDigest)
