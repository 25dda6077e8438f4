// data.kind arrays through codistill-train: configs/fmnist_mlp.yaml on Fashion-MNIST written
// as .npy, .npz and HDF5 ends in the very checkpoint its IDX files give, and a bad array
// file stops the trainer with a message naming it, before anything is written.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "support/checkpoint_compare.hpp"
#include "support/process.hpp"
#include "support/short_run.hpp"
#include "support/test_util.hpp"

using namespace codistill::test;
namespace fs = std::filesystem;

namespace {

bool numpy_and_fmnist() {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    skip("no Fashion-MNIST (Debian's dataset-fashion-mnist)");
    return false;
  }
  if (std::system("/usr/bin/python3 -c 'import numpy, h5py' >/dev/null 2>&1") != 0) {
    skip("no NumPy/h5py for /usr/bin/python3 (scripts/setup.sh installs them)");
    return false;
  }
  return true;
}

}  // namespace

TEST_CASE("fmnist_mlp on Fashion-MNIST as .npy, .npz and HDF5 ends in the IDX run's checkpoint",
          "[process][arrays]") {
  if (!numpy_and_fmnist()) return;
  TempDir dir;
  const auto w = run_command("/usr/bin/python3 " + std::string(CODISTILL_SOURCE_DIR) +
                                 "/tests/codistill/data/write_arrays.py fmnist " + dir.str("arrays"),
                             dir);
  INFO(w.out << w.err);
  REQUIRE(w.exit_code == 0);
  const std::string want = short_training_run(dir, "idx", "fmnist_mlp.yaml", "");
  for (const char* container : {"npy", "deflated.npz", "chunked.h5"}) {
    INFO(container);
    const std::string got = short_training_run(dir, std::string("arrays-") + container, "fmnist_mlp.yaml",
                                               "--set data.kind=arrays --set data.path=" + dir.str("arrays/") +
                                                   container);
    require_identical(got, want);
  }
}

TEST_CASE("a bad array file stops codistill-train with its name, before the run starts", "[process][arrays]") {
  if (!numpy_and_fmnist()) return;
  TempDir dir;
  run_python(R"(import sys
import numpy as np
d, x = sys.argv[1], np.zeros((4, 8, 8), np.uint8)
for key, value in (("train_x", x), ("test_x", x), ("test_y", np.zeros(4, np.int64)),
                   ("train_y", np.array([0, 1, 2, None], dtype=object))):
    np.save(d + "/" + key, value)
)", dir);
  const auto r = run_command(train_exe() + " --config " + std::string(CODISTILL_SOURCE_DIR) +
                                 "/configs/fmnist_mlp.yaml --run-dir " + dir.str("run") +
                                 " --set data.kind=arrays --set data.path=" + dir.str(),
                             dir);
  INFO(r.out << r.err);
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("train_y.npy: dtype object ('|O') holds pickled Python objects: refused") != std::string::npos);
  CHECK_FALSE(fs::exists(dir.path() / "run" / "worker-000"));
}

TEST_CASE("a shard per worker through {worker}, data.json refuses a restart on other data", "[process][arrays]") {
  if (!numpy_and_fmnist()) return;
  TempDir dir;
  run_python(R"(import os, sys
import numpy as np
d, r = sys.argv[1], np.random.default_rng(1)
for s in ("shard-0", "shard-1", "other"):
    os.makedirs(d + "/" + s)
    for k, n in (("train", 256), ("test", 64)):
        np.save(d + "/" + s + "/" + k + "_x.npy", r.integers(0, 256, (n, 8, 8), np.uint8))
        np.save(d + "/" + s + "/" + k + "_y.npy", r.integers(0, 3, n))
)", dir);
  const std::string base = train_exe() + " --config " + std::string(CODISTILL_SOURCE_DIR) +
                           "/configs/fmnist_mlp.yaml --run-dir " + dir.str("run") +
                           " --set data.kind=arrays --set run.workers=2 --set run.threads=1"
                           " --set train.eval_every=0 --set checkpoint.every=5 --set data.batch_size=32";
  for (int worker : {0, 1}) {
    const auto r = run_command(base + " --set run.worker=" + std::to_string(worker) + " --set train.steps=5" +
                                   " --set 'data.path=" + dir.str("shard-{worker}") + "'",
                               dir);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("256 train / 64 test examples") != std::string::npos);
    CHECK(r.out.find("shard none") != std::string::npos);
    const std::string record = read_text(dir.path() / "run" / ("worker-00" + std::to_string(worker)) / "data.json");
    CHECK(record.find("shard-" + std::to_string(worker) + "/train_x.npy") != std::string::npos);
  }
  // The same config, but shard-0 now holds other files (a node whose local disk changed):
  // worker 0's restart is refused before anything else; with its own files back it finds
  // its run finished.
  const std::string run0 = base + " --set run.worker=0 --set train.steps=5 --set 'data.path=" +
                           dir.str("shard-{worker}") + "'";
  fs::rename(dir.path() / "shard-0", dir.path() / "shard-0.orig");
  fs::rename(dir.path() / "other", dir.path() / "shard-0");
  const auto other = run_command(run0, dir);
  INFO(other.out << other.err);
  CHECK(other.exit_code == 2);
  CHECK(other.err.find("worker-000/data.json: this worker trained on other data") != std::string::npos);
  fs::rename(dir.path() / "shard-0", dir.path() / "other");
  fs::rename(dir.path() / "shard-0.orig", dir.path() / "shard-0");
  const auto same = run_command(run0, dir);
  INFO(same.out << same.err);
  CHECK(same.exit_code == 0);
  CHECK(same.out.find("has finished") != std::string::npos);
}

TEST_CASE("a .npy larger than the process may allocate trains from its map", "[process][arrays]") {
  if (!numpy_and_fmnist()) return;
  TempDir dir;
  // 600,000 examples of 28 x 28 bytes: 470 MB on disk, 1.88 GB as float32. The data limit
  // (RLIMIT_DATA: private writable memory, not a read-only map of a file) of 700 MB forbids
  // the float copy; training from the map needs only the rows of a batch.
  run_python(R"(import sys
import numpy as np
d, n = sys.argv[1], 600000
x = np.lib.format.open_memmap(d + "/train_x.npy", mode="w+", dtype=np.uint8, shape=(n, 28, 28))
for i in range(0, n, 50000):
    x[i:i + 50000] = (np.arange(50000 * 784) % 251).reshape(50000, 28, 28)
x.flush()
np.save(d + "/train_y.npy", np.arange(n) % 10)
np.save(d + "/test_x.npy", np.zeros((100, 28, 28), np.uint8))
np.save(d + "/test_y.npy", np.arange(100) % 10)
)", dir);
  REQUIRE(fs::file_size(dir.path() / "train_x.npy") > 470'000'000);
  std::string limit = "ulimit -d 700000 && ";
#if defined(CODISTILL_SANITIZED)
  limit.clear();  // the sanitizers' shadow memory counts against the limit: the map alone is checked here
#endif
  const auto r = run_command(limit + train_exe() + " --config " + std::string(CODISTILL_SOURCE_DIR) +
                                 "/configs/fmnist_mlp.yaml --run-dir " + dir.str("run") +
                                 " --set data.kind=arrays --set data.path=" + dir.str() +
                                 " --set train.steps=30 --set train.eval_every=0 --set checkpoint.every=0"
                                 " --set run.threads=1",
                             dir);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("600000 train / 100 test examples") != std::string::npos);
  CHECK(r.out.find("done: 30 steps") != std::string::npos);
}
