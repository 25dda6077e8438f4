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
  const auto w = run_command("/usr/bin/python3 -c \"import numpy as np; d = '" + dir.str() +
                                 "'; x = np.zeros((4, 8, 8), np.uint8); [np.save(d + '/' + k, v) for k, v in "
                                 "(('train_x', x), ('test_x', x), ('test_y', np.zeros(4, np.int64)), "
                                 "('train_y', np.array([0, 1, 2, None], dtype=object)))]\"",
                             dir);
  INFO(w.out << w.err);
  REQUIRE(w.exit_code == 0);
  const auto r = run_command(train_exe() + " --config " + std::string(CODISTILL_SOURCE_DIR) +
                                 "/configs/fmnist_mlp.yaml --run-dir " + dir.str("run") +
                                 " --set data.kind=arrays --set data.path=" + dir.str(),
                             dir);
  INFO(r.out << r.err);
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("train_y.npy: dtype object ('|O') holds pickled Python objects: refused") != std::string::npos);
  CHECK_FALSE(fs::exists(dir.path() / "run" / "worker-000"));
}
