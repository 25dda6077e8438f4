// data.kind arrays: Fashion-MNIST written by NumPy and h5py in every container loads to the
// very dataset the IDX files give; layouts and dtypes convert as they should; and every bad
// file or value is an error naming the file, the key and what is wrong.
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "codistill/data/dataset.hpp"
#include "support/process.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using namespace codistill::data;
namespace fs = std::filesystem;

namespace {

const std::string kWriter = std::string(CODISTILL_SOURCE_DIR) + "/tests/codistill/data/write_arrays.py";

// Runs write_arrays.py; false (and the test is skipped) where NumPy or h5py is missing.
bool write_arrays(const std::string& args, const test::TempDir& dir) {
  if (std::system("/usr/bin/python3 -c 'import numpy, h5py' >/dev/null 2>&1") != 0) {
    test::skip("no NumPy/h5py for /usr/bin/python3 (scripts/setup.sh installs them)");
    return false;
  }
  const auto r = test::run_command("/usr/bin/python3 " + kWriter + " " + args, dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  return true;
}

DataConfig arrays_config(const std::string& path) {
  DataConfig c;
  c.kind = "arrays";
  c.path = path;
  return c;
}

// Every row as float32, as training reads it (decoded where the values are byte codes).
std::vector<float> rows(const Dataset& d) {
  std::vector<float> out(static_cast<std::size_t>(d.size() * d.example_numel()));
  d.copy_rows(0, d.size(), out.data());
  return out;
}

void require_same(const Dataset& a, const Dataset& b) {
  REQUIRE(a.shape() == b.shape());
  CHECK(rows(a) == rows(b));
  CHECK(a.labels == b.labels);
  CHECK(a.classes == b.classes);
  CHECK(a.normalization.shift == b.normalization.shift);
  CHECK(a.normalization.scale == b.normalization.scale);
}

// A .npy file holding `data` bytes of dtype `descr` and shape `shape` (a Python tuple).
void put_npy(const fs::path& p, const std::string& descr, const std::string& shape, const std::string& data) {
  std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::ofstream f(p, std::ios::binary);
  f << "\x93NUMPY" << '\x01' << '\x00' << static_cast<char>(h.size() & 0xff) << static_cast<char>(h.size() >> 8)
    << h << data;
}

}  // namespace

TEST_CASE("Fashion-MNIST as .npy, .npz and HDF5 loads bit for bit as from its IDX files", "[data][arrays]") {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
    return test::skip("no Fashion-MNIST (Debian's dataset-fashion-mnist)");
  test::TempDir dir;
  if (!write_arrays("fmnist " + dir.str(), dir)) return;
  DataConfig idx;
  idx.train_limit = 20000;  // the whole test split, a third of training: keeps the case quick
  const Splits want = load_dataset(idx);
  for (const char* container : {"npy", "stored.npz", "deflated.npz", "contiguous.h5", "chunked.h5"}) {
    INFO(container);
    DataConfig c = arrays_config(dir.str(container));
    c.train_limit = idx.train_limit;
    const Splits got = load_dataset(c);
    // Bytes lying plainly in the file are trained from the map; the rest is read in.
    const std::string name = container;
    CHECK(got.train.is_mapped() == (name == "npy" || name == "stored.npz" || name == "contiguous.h5"));
    require_same(got.train, want.train);
    require_same(got.test, want.test);
  }
}

TEST_CASE("arrays: layouts, float dtypes, feature vectors and data.classes", "[data][arrays]") {
  test::TempDir dir;
  if (!write_arrays("rgb " + dir.str() + " " + std::to_string(test::fresh_seed() % 1000000), dir)) return;
  DataConfig nhwc = arrays_config(dir.str("nhwc")), nchw = arrays_config(dir.str("nchw"));
  nchw.layout = "nchw";
  nhwc.normalize = nchw.normalize = "none";
  const Splits a = load_dataset(nhwc), b = load_dataset(nchw);
  CHECK(a.train.example_shape() == kernels::Shape{3, 5, 7});
  CHECK_FALSE(a.train.is_mapped());  // interleaved channels are reordered in memory
  CHECK(b.train.is_mapped());
  require_same(a.train, b.train);
  require_same(a.test, b.test);
  // The same pixels as float16 and float64 are the same values; "unit" leaves floats alone.
  for (const char* variant : {"f16", "f64"}) {
    INFO(variant);
    DataConfig f = arrays_config(dir.str(variant));
    f.normalize = "none";
    const Splits c = load_dataset(f);
    CHECK(rows(c.train) == rows(a.train));
    CHECK_FALSE(c.train.is_mapped());       // floats are converted into memory
    CHECK_FALSE(c.train.codes.empty());     // whole numbers in 0..255: kept as byte codes
    f.normalize = "unit";
    CHECK(load_dataset(f).train.normalization.scale == 1.0);
  }
  nhwc.normalize = "unit";
  CHECK(load_dataset(nhwc).train.normalization.scale == 255.0);
  nhwc.classes = 7;
  CHECK(load_dataset(nhwc).train.classes == 7);
  nhwc.classes = 2;  // the labels go up to 3
  CHECK_THROWS_WITH(load_dataset(nhwc), Catch::Contains("train_y.npy: label ") &&
                                            Catch::Contains("is outside [0, 2) (data.classes)"));
  // Feature vectors [N, F]: examples of shape [F, 1, 1].
  fs::create_directories(dir.path() / "features");
  for (const char* split : {"train", "test"}) {
    put_npy(dir.path() / "features" / (std::string(split) + "_x.npy"), "<f4", "(2, 3)", std::string(24, '\0'));
    put_npy(dir.path() / "features" / (std::string(split) + "_y.npy"), "|u1", "(2,)", std::string("\x00\x01", 2));
  }
  const Splits feat = load_dataset(arrays_config(dir.str("features")));
  CHECK(feat.train.example_shape() == kernels::Shape{3, 1, 1});
  CHECK(feat.train.classes == 2);
}

TEST_CASE("arrays: bad files and values are errors naming file, key, dtype and shape", "[data][arrays]") {
  test::TempDir dir;
  const fs::path d = dir.path() / "set";
  fs::create_directories(d);
  auto write_set = [&](const std::string& x_descr, const std::string& x_shape, const std::string& x_data,
                       const std::string& y_descr, const std::string& y_shape, const std::string& y_data) {
    for (const char* split : {"train", "test"}) {
      put_npy(d / (std::string(split) + "_x.npy"), x_descr, x_shape, x_data);
      put_npy(d / (std::string(split) + "_y.npy"), y_descr, y_shape, y_data);
    }
  };
  const DataConfig c = arrays_config(d.string());
  write_set("|u1", "(2, 2, 2)", std::string(8, '\1'), "<i8", "(2,)", std::string(16, '\0'));
  CHECK(load_dataset(c).train.size() == 2);

  write_set("|u1", "(3, 2, 2)", std::string(12, '\1'), "<i8", "(2,)", std::string(16, '\0'));
  CHECK_THROWS_WITH(load_dataset(c), Catch::Contains("train_x.npy: has 3 examples but") &&
                                         Catch::Contains("train_y.npy has 2 labels"));
  write_set("<i2", "(2, 2, 2)", std::string(16, '\1'), "<i8", "(2,)", std::string(16, '\0'));
  CHECK_THROWS_WITH(load_dataset(c), Catch::Contains("train_x.npy: unsupported dtype int16 for examples"));
  write_set("|u1", "(2, 2, 2)", std::string(8, '\1'), "<f4", "(2,)", std::string(8, '\0'));
  CHECK_THROWS_WITH(load_dataset(c), Catch::Contains("train_y.npy: labels must be integers, not float32"));
  write_set("|u1", "(2, 2, 2)", std::string(8, '\1'), "<i8", "(2, 1)", std::string(16, '\0'));
  CHECK_THROWS_WITH(load_dataset(c), Catch::Contains("labels must have shape (N,), not (2, 1)"));
  write_set("|u1", "(2, 2, 2)", std::string(8, '\1'), "|i1", "(2,)", std::string("\x00\xff", 2));
  CHECK_THROWS_WITH(load_dataset(c), Catch::Contains("train_y.npy: label -1 at index 1 is outside [0, 1000)"));
  write_set("|u1", "(2, 2, 2, 2, 2)", std::string(32, '\1'), "<i8", "(2,)", std::string(16, '\0'));
  CHECK_THROWS_WITH(load_dataset(c), Catch::Contains("examples must have shape (N, F), (N, H, W)") &&
                                         Catch::Contains("not (2, 2, 2, 2, 2)"));
  write_set("|u1", "(2, 2, 2)", std::string(8, '\1'), "<i8", "(2,)", std::string(16, '\0'));
  fs::remove(d / "test_y.npy");
  CHECK_THROWS_WITH(load_dataset(c), Catch::Contains("test_y.npy: missing"));
  put_npy(d / "test_y.npy", "<i8", "(2,)", std::string(16, '\0'));
  put_npy(d / "test_x.npy", "|u1", "(2, 3, 3)", std::string(18, '\1'));
  CHECK_THROWS_WITH(load_dataset(c), Catch::Contains("test examples have shape"));
  put_npy(d / "test_x.npy", "<f4", "(2, 2, 2)", std::string(32, '\0'));
  CHECK_THROWS_WITH(load_dataset(c), Catch::Contains("test_x.npy: dtype float32 differs from train_x's uint8"));

  DataConfig layout = c;
  layout.layout = "chw";
  CHECK_THROWS_AS(load_dataset(layout), std::invalid_argument);
  CHECK_THROWS_WITH(load_dataset(arrays_config(dir.str("nothing"))), Catch::Contains("does not exist"));
  test::write_text(dir.path() / "plain.txt", "not an array");
  CHECK_THROWS_WITH(load_dataset(arrays_config(dir.str("plain.txt"))),
                    Catch::Contains("neither a folder of .npy files, an .npz archive nor an HDF5 file"));
}

TEST_CASE("arrays: a missing key in an .npz or HDF5 file names the keys there are", "[data][arrays]") {
  test::TempDir dir;
  if (std::system("/usr/bin/python3 -c 'import numpy, h5py' >/dev/null 2>&1") != 0)
    return test::skip("no NumPy/h5py for /usr/bin/python3 (scripts/setup.sh installs them)");
  test::run_python(R"(import sys
import h5py
import numpy as np
d, x, y = sys.argv[1], np.zeros((2, 3), np.uint8), np.zeros(2, np.int64)
np.savez(d + "/a.npz", train_x=x, train_y=y, test_x=x)
with h5py.File(d + "/a.h5", "w") as f:
    f["train_x"], f["train_y"], f["test_x"], f["test_y"] = x, y, x, np.array([b"a", b"b"])
)", dir);
  CHECK_THROWS_WITH(load_dataset(arrays_config(dir.str("a.npz"))),
                    Catch::Contains("a.npz: no key 'test_y' (the archive holds: train_x, train_y, test_x)"));
  CHECK_THROWS_WITH(load_dataset(arrays_config(dir.str("a.h5"))),
                    Catch::Contains("a.h5: test_y: unsupported element type string"));
}
