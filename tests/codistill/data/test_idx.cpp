// IDX reading: exact round trips of gzip and raw files written here, a clear error for
// every kind of malformed file, and the real Fashion-MNIST files when installed.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "codistill/data/dataset.hpp"
#include "codistill/data/idx.hpp"
#include "codistill/util/rng.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using namespace codistill::data;
namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

namespace {

// A fresh folder per test case, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("codistill-test-idx-" + std::to_string(::getpid()) + "-" + std::to_string(test::fresh_seed()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

void put_be32(Bytes& b, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<std::uint8_t>(v >> shift));
}

Bytes images_file(std::uint32_t n, std::uint32_t rows, std::uint32_t cols, const Bytes& pixels) {
  Bytes b;
  put_be32(b, 0x00000803);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

Bytes labels_file(const Bytes& labels) {
  Bytes b;
  put_be32(b, 0x00000801);
  put_be32(b, static_cast<std::uint32_t>(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

void write_raw(const std::string& path, const Bytes& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

// mode "wb" writes one gzip member; "ab" appends another one to the file.
void write_gzip(const std::string& path, const Bytes& bytes, const char* mode = "wb") {
  gzFile f = gzopen(path.c_str(), mode);
  REQUIRE(f != nullptr);
  if (!bytes.empty()) REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

Bytes read_raw(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

Bytes random_bytes(std::size_t n, std::uint64_t seed, int below = 256) {
  Rng rng(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng.below(static_cast<std::uint64_t>(below)));
  return b;
}

// The message of the std::runtime_error that fn throws ("" when it throws none).
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("IDX files round-trip exactly, gzip and raw", "[data][idx]") {
  const std::uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  TempDir dir;
  const std::uint32_t n = 37, rows = 5, cols = 3;
  const Bytes pixels = random_bytes(n * rows * cols, seed);
  Bytes labels = random_bytes(n, seed + 1, 7);
  labels[4] = 6;  // the largest label is present, so classes is inferred as 7
  const bool gz = GENERATE(true, false);
  INFO((gz ? "gzip" : "raw"));
  auto write = [&](const std::string& p, const Bytes& b) { gz ? write_gzip(p, b) : write_raw(p, b); };
  write(dir / "img", images_file(n, rows, cols, pixels));
  write(dir / "lab", labels_file(labels));

  IdxImages img = read_idx_images(dir / "img");
  CHECK(img.count == n);
  CHECK(img.rows == rows);
  CHECK(img.cols == cols);
  CHECK(img.pixels == pixels);
  CHECK(read_idx_labels(dir / "lab") == labels);

  Dataset d = read_idx_dataset(dir / "img", dir / "lab", 0, "tiny");
  d.validate();
  CHECK(d.images.shape() == kernels::Shape{n, 1, rows, cols});
  CHECK(d.classes == 7);
  CHECK(d.size() == n);
  CHECK(d.example_numel() == rows * cols);
  for (std::size_t i = 0; i < pixels.size(); ++i) REQUIRE(d.images.data<float>()[i] == static_cast<float>(pixels[i]));
  CHECK(std::equal(labels.begin(), labels.end(), d.labels.begin(), d.labels.end()));
  CHECK(read_idx_dataset(dir / "img", dir / "lab", 10, "tiny").classes == 10);
}

TEST_CASE("a gzip file of several members reads as their concatenation", "[data][idx]") {
  TempDir dir;
  const Bytes labels = random_bytes(50, 3, 10);
  const Bytes file = labels_file(labels);
  write_gzip(dir / "lab.gz", Bytes(file.begin(), file.begin() + 20));
  write_gzip(dir / "lab.gz", Bytes(file.begin() + 20, file.end()), "ab");
  CHECK(read_idx_labels(dir / "lab.gz") == labels);
}

// A well-formed 4-image file and its labels, to damage one way per SECTION, and the check
// that an error names both the file and the problem.
struct MalformedIdx {
  TempDir dir;
  const Bytes pixels = random_bytes(4 * 3 * 2, 11);
  const Bytes images = images_file(4, 3, 2, pixels);
  const Bytes labels = labels_file({0, 1, 2, 3});

  static std::string images_error(const std::string& path) {
    return error_of([&] { read_idx_images(path); });
  }
  static void expect(const std::string& msg, const std::string& path, const std::string& problem) {
    INFO(msg);
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find(problem) != std::string::npos);
  }
};

TEST_CASE_METHOD(MalformedIdx, "malformed IDX files give errors naming the file and the problem", "[data][idx]") {
  SECTION("missing file") { expect(images_error(dir / "nope.gz"), dir / "nope.gz", "cannot open file"); }
  SECTION("empty file") {
    write_raw(dir / "empty", {});
    expect(images_error(dir / "empty"), dir / "empty", "file is empty");
  }
  SECTION("neither gzip nor IDX") {
    write_raw(dir / "text", {'h', 'e', 'l', 'l', 'o'});
    expect(images_error(dir / "text"), dir / "text", "neither a gzip file");
  }
  SECTION("wrong magic: a label file where images are expected, and the reverse") {
    write_gzip(dir / "lab.gz", labels);
    write_gzip(dir / "img.gz", images);
    expect(images_error(dir / "lab.gz"), dir / "lab.gz", "wrong magic 0x00000801, expected 0x00000803");
    expect(error_of([&] { read_idx_labels(dir / "img.gz"); }), dir / "img.gz",
           "wrong magic 0x00000803, expected 0x00000801");
  }
  SECTION("wrong data type in the magic") {
    Bytes ints = images;
    ints[2] = 0x0C;  // int32 elements
    write_raw(dir / "ints", ints);
    expect(images_error(dir / "ints"), dir / "ints", "wrong magic 0x00000C03");
  }
  SECTION("truncated header, raw and gzip") {
    write_raw(dir / "short", Bytes(images.begin(), images.begin() + 9));
    expect(images_error(dir / "short"), dir / "short", "truncated header: expected 16 bytes, got 9");
    write_gzip(dir / "short.gz", Bytes(images.begin(), images.begin() + 3));
    expect(images_error(dir / "short.gz"), dir / "short.gz", "truncated header: expected 16 bytes, got 3");
  }
  SECTION("truncated data, raw and gzip") {
    write_raw(dir / "cut", Bytes(images.begin(), images.end() - 5));
    expect(images_error(dir / "cut"), dir / "cut", "truncated data: expected 24 bytes of pixels after the header, got 19");
    write_gzip(dir / "cut.gz", Bytes(images.begin(), images.end() - 1));
    expect(images_error(dir / "cut.gz"), dir / "cut.gz", "expected 24 bytes of pixels after the header, got 23");
  }
  SECTION("trailing bytes after the data, raw and gzip") {
    Bytes longer = images;
    longer.insert(longer.end(), {1, 2, 3});
    write_raw(dir / "long", longer);
    expect(images_error(dir / "long"), dir / "long", "3 trailing bytes after the 24 bytes of pixels");
    write_gzip(dir / "long.gz", longer);
    expect(images_error(dir / "long.gz"), dir / "long.gz", "3 trailing bytes");
  }
}

// The same checks for damaged gzip streams, implausible headers and datasets whose two
// files disagree (one test case would be over 80 lines).
TEST_CASE_METHOD(MalformedIdx,
                 "malformed gzip IDX files and mismatched datasets give errors naming the file and the problem",
                 "[data][idx]") {
  SECTION("garbage after the gzip stream") {
    write_gzip(dir / "junk.gz", images);
    Bytes file = read_raw(dir / "junk.gz");
    file.insert(file.end(), {'j', 'u', 'n', 'k'});
    write_raw(dir / "junk.gz", file);
    expect(images_error(dir / "junk.gz"), dir / "junk.gz", "trailing bytes after the end of the gzip stream");
  }
  SECTION("gzip file cut off, inside the data and inside the trailer") {
    write_gzip(dir / "full.gz", images);
    const Bytes file = read_raw(dir / "full.gz");
    write_raw(dir / "cut.gz", Bytes(file.begin(), file.begin() + static_cast<long>(file.size() / 2)));
    std::string msg = images_error(dir / "cut.gz");
    expect(msg, dir / "cut.gz", "the gzip stream is cut off");
    write_raw(dir / "notrailer.gz", Bytes(file.begin(), file.end() - 3));
    expect(images_error(dir / "notrailer.gz"), dir / "notrailer.gz", "cut off");
  }
  SECTION("gzip checksum mismatch") {
    write_gzip(dir / "crc.gz", images);
    Bytes file = read_raw(dir / "crc.gz");
    file[file.size() - 8] ^= 0xFF;  // first byte of the CRC-32 in the trailer
    write_raw(dir / "crc.gz", file);
    expect(images_error(dir / "crc.gz"), dir / "crc.gz", "corrupt gzip data");
  }
  SECTION("zero examples") {
    write_raw(dir / "none", images_file(0, 28, 28, {}));
    expect(images_error(dir / "none"), dir / "none", "zero examples");
  }
  SECTION("a header declaring an absurd size") {
    write_raw(dir / "huge", images_file(0xFFFFFFFF, 0xFFFF, 0xFFFF, {}));
    expect(images_error(dir / "huge"), dir / "huge", "implausible header");
  }
  SECTION("images and labels count mismatch") {
    write_raw(dir / "img", images);
    write_raw(dir / "lab", labels_file({0, 1, 2}));
    std::string msg = error_of([&] { read_idx_dataset(dir / "img", dir / "lab", 10, "x"); });
    expect(msg, dir / "img", "holds 4 images but");
    expect(msg, dir / "lab", "holds 3 labels");
  }
  SECTION("label out of range") {
    write_raw(dir / "img", images);
    write_raw(dir / "lab", labels_file({0, 9, 12, 3}));
    expect(error_of([&] { read_idx_dataset(dir / "img", dir / "lab", 10, "x"); }), dir / "lab",
           "label 12 at index 2 is out of range for 10 classes");
  }
}

TEST_CASE("rejected IDX files leave no file descriptor open", "[data][idx]") {
  // Found by fuzz/fuzz_idx: a header rejected inside the reader's constructor leaked the
  // FILE (the destructor never ran), one descriptor per bad file.
  TempDir dir;
  write_raw(dir / "empty", {});
  write_raw(dir / "text", {'h', 'e', 'l', 'l', 'o'});
  auto open_fds = [] {
    return std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator{});
  };
  const auto before = open_fds();
  for (int i = 0; i < 200; ++i) {
    CHECK_THROWS(read_idx_images(dir / "empty"));
    CHECK_THROWS(read_idx_labels(dir / "text"));
  }
  CHECK(open_fds() == before);
}

TEST_CASE("load_dataset kind idx: paths, limits, normalization", "[data][idx]") {
  TempDir dir;
  const Bytes train_px = random_bytes(30 * 4 * 4, 5), test_px = random_bytes(10 * 4 * 4, 6);
  write_gzip(dir / "tr-img.gz", images_file(30, 4, 4, train_px));
  write_raw(dir / "tr-lab", labels_file(random_bytes(30, 7, 3)));
  write_gzip(dir / "te-img.gz", images_file(10, 4, 4, test_px));
  write_gzip(dir / "te-lab.gz", labels_file(random_bytes(10, 8, 5)));
  DataConfig cfg;
  cfg.kind = "idx";
  cfg.path = dir.path.string();
  cfg.train_images = "tr-img.gz";
  cfg.train_labels = dir / "tr-lab";  // absolute: used as is
  cfg.test_images = "te-img.gz";
  cfg.test_labels = "te-lab.gz";

  cfg.normalize = "none";
  Splits raw = load_dataset(cfg);
  CHECK(raw.train.size() == 30);
  CHECK(raw.test.size() == 10);
  CHECK(raw.train.classes == raw.test.classes);
  CHECK(raw.train.classes == 1 + std::max(*std::max_element(raw.train.labels.begin(), raw.train.labels.end()),
                                          *std::max_element(raw.test.labels.begin(), raw.test.labels.end())));
  CHECK(raw.test.images.data<float>()[17] == static_cast<float>(test_px[17]));

  SECTION("unit divides by 255") {
    cfg.normalize = "unit";
    Splits u = load_dataset(cfg);
    CHECK(u.train.normalization.scale == 255.0);
    CHECK(u.test.images.data<float>()[17] == Approx(test_px[17] / 255.0));
  }
  SECTION("standard uses the training split's statistics for both splits") {
    cfg.normalize = "standard";
    Splits s = load_dataset(cfg);
    const auto& n = s.train.normalization;
    CHECK(n.kind == "standard");
    CHECK(s.test.normalization.shift == n.shift);
    double sum = 0, sq = 0;
    const float* x = s.train.images.data<float>();
    for (std::int64_t i = 0; i < s.train.images.numel(); ++i) sum += x[i], sq += double(x[i]) * x[i];
    const double count = static_cast<double>(s.train.images.numel());
    CHECK(sum / count == Approx(0).margin(1e-5));
    CHECK(sq / count == Approx(1).epsilon(1e-5));
    CHECK(s.test.images.data<float>()[17] == Approx((test_px[17] - n.shift) / n.scale));
  }
  SECTION("limits keep the first examples") {
    cfg.train_limit = 7;
    cfg.test_limit = 100;  // above the split's size: the whole split
    Splits l = load_dataset(cfg);
    CHECK(l.train.images.shape() == kernels::Shape{7, 1, 4, 4});
    CHECK(std::equal(l.train.labels.begin(), l.train.labels.end(), raw.train.labels.begin()));
    CHECK(l.train.images.data<float>()[7 * 16 - 1] == raw.train.images.data<float>()[7 * 16 - 1]);
    CHECK(l.test.size() == 10);
  }
  SECTION("test images of another shape are refused") {
    write_gzip(dir / "te-img.gz", images_file(10, 2, 8, test_px));
    CHECK_THROWS_WITH(load_dataset(cfg), Catch::Contains("test examples have shape [1, 2, 8]"));
  }
  SECTION("bad config values") {
    cfg.kind = "cifar";
    CHECK_THROWS_WITH(load_dataset(cfg), Catch::Contains("valid: arrays, fashion-mnist, idx, synthetic"));
    cfg.kind = "idx";
    cfg.normalize = "minmax";
    CHECK_THROWS_WITH(load_dataset(cfg), Catch::Contains("valid: standard, unit, none"));
    cfg.normalize = "none";
    cfg.train_limit = -1;
    CHECK_THROWS_AS(load_dataset(cfg), std::invalid_argument);
  }
}

TEST_CASE("Fashion-MNIST from the Debian package", "[data][idx][fashion-mnist]") {
  DataConfig cfg;  // kind fashion-mnist, default path
  if (!fs::exists(fs::path(cfg.path) / "train-images-idx3-ubyte.gz")) {
    return test::skip("Fashion-MNIST not installed under " + cfg.path + " (package dataset-fashion-mnist)");
  }
  cfg.normalize = "none";
  Splits s = load_dataset(cfg);
  CHECK(s.train.images.shape() == kernels::Shape{60000, 1, 28, 28});
  CHECK(s.test.images.shape() == kernels::Shape{10000, 1, 28, 28});
  CHECK(s.train.classes == 10);
  CHECK(s.test.classes == 10);
  std::vector<int> train_counts(10), test_counts(10);
  for (auto l : s.train.labels) train_counts.at(l)++;
  for (auto l : s.test.labels) test_counts.at(l)++;
  CHECK(train_counts == std::vector<int>(10, 6000));
  CHECK(test_counts == std::vector<int>(10, 1000));
  auto [lo, hi] = std::minmax_element(s.train.images.data<float>(), s.train.images.data<float>() + s.train.images.numel());
  CHECK(*lo == 0.0f);
  CHECK(*hi == 255.0f);
  // The well-known statistics of the training pixels: mean 0.2860 and std 0.3530 on [0, 1].
  Normalization n = normalize(s, "standard", 255.0);
  CHECK(n.shift / 255.0 == Approx(0.2860).margin(5e-4));
  CHECK(n.scale / 255.0 == Approx(0.3530).margin(5e-4));
}
