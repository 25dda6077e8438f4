// Fault injection: every way a checkpoint can be damaged or a write can fail is detected
// and reported with a clear reason; a failed write leaves nothing behind.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/edit.hpp"
#include "checkpoint/fault_seam.hpp"
#include "sample_checkpoint.hpp"
#include "support/process.hpp"

using namespace codistill;
using namespace codistill::checkpoint;
namespace fs = std::filesystem;

namespace {

std::string write_sample(const test::TempDir& dir, const test::SampleCheckpoint& sample = test::SampleCheckpoint()) {
  std::string path = dir.str("ckpt-000000100.h5");
  checkpoint::write(path, sample.view(), test::small_chunks());
  REQUIRE(verify(path).valid);
  return path;
}

// The reason read() gives, also checked to be the one verify() gives.
std::string reason(const std::string& path, const ReadOptions& options = {}) {
  try {
    checkpoint::read(path, options);
  } catch (const CheckpointError& e) {
    CHECK(e.path() == path);
    if (!options.expected_fingerprint && options.direct_chunk_io) {
      VerifyResult v = verify(path);
      CHECK_FALSE(v.valid);
      CHECK(v.reason == e.reason());
    }
    return e.reason();
  }
  FAIL("read did not throw for " << path);
  return {};
}

void flip_byte(const std::string& path, std::uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
  REQUIRE(f.good());
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

}  // namespace

TEST_CASE("a truncated file is rejected", "[checkpoint][faults]") {
  test::TempDir dir;
  std::string path = write_sample(dir);
  fs::resize_file(path, fs::file_size(path) / 2);
  CHECK_THAT(reason(path), Catch::Contains("truncated file"));
}

TEST_CASE("a flipped byte in a parameter chunk fails its fletcher32 check", "[checkpoint][faults]") {
  test::TempDir dir;
  std::string path = write_sample(dir);
  auto chunks = stored_extents(path, "/params/fc1/weight");
  REQUIRE(chunks.size() > 2);
  const auto& middle = chunks[chunks.size() / 2];
  flip_byte(path, middle.file_offset + middle.bytes / 2);
  CHECK_THAT(reason(path), Catch::Contains("corrupt data: fletcher32 checksum mismatch in chunk") &&
                               Catch::Contains("/params/fc1/weight"));
  // HDF5's own filter pipeline sees the same damage.
  ReadOptions pipeline;
  pipeline.direct_chunk_io = false;
  CHECK_THAT(reason(path, pipeline), Catch::Contains("/params/fc1/weight") && Catch::Contains("Fletcher32"));
}

TEST_CASE("a flipped byte outside any checksummed chunk fails the content digest", "[checkpoint][faults]") {
  // A scalar is stored contiguous, without fletcher32: only the digest covers it.
  test::TempDir dir;
  std::string path = write_sample(dir);
  auto extent = stored_extents(path, "/state/optimizer/step");
  REQUIRE(extent.size() == 1);
  REQUIRE(extent[0].bytes == 8);
  flip_byte(path, extent[0].file_offset);
  CHECK_THAT(reason(path), Catch::StartsWith("content digest mismatch: stored ") && Catch::Contains(", computed "));
}

TEST_CASE("a rewritten content digest is caught", "[checkpoint][faults]") {
  test::TempDir dir;
  std::string path = write_sample(dir);
  set_attribute(path, "content_digest", std::string("0000000000000000"));
  CHECK_THAT(reason(path), Catch::StartsWith("content digest mismatch: stored 0000000000000000, computed "));
  // Without the digest check the data itself is fine.
  ReadOptions no_digest;
  no_digest.verify_digest = false;
  CHECK(checkpoint::read(path, no_digest).params.size() == 3);
}

TEST_CASE("a missing or mistyped attribute is named", "[checkpoint][faults]") {
  test::TempDir dir;
  std::string path = write_sample(dir);
  delete_attribute(path, "examples_seen");
  CHECK(reason(path) == "missing attribute examples_seen");
  set_attribute(path, "examples_seen", std::int64_t{5});
  CHECK(verify(path).valid);
  set_attribute(path, "step", std::string("one hundred"));
  CHECK(reason(path) == "attribute step is not an integer (it is string)");
  set_attribute(path, "step", std::int64_t{100});
  delete_attribute(path, "teacher_steps");
  CHECK(reason(path) == "missing attribute teacher_steps");
}

TEST_CASE("another format or format_version is refused", "[checkpoint][faults]") {
  test::TempDir dir;
  std::string path = write_sample(dir);
  set_attribute(path, "format_version", std::int64_t{2});
  CHECK(reason(path) == "unsupported format_version 2");
  set_attribute(path, "format", std::string("something.else"));
  CHECK_THAT(reason(path), Catch::StartsWith("not a codistill checkpoint"));
}

TEST_CASE("a checkpoint of another model is refused when a fingerprint is expected", "[checkpoint][faults]") {
  test::TempDir dir;
  std::string path = write_sample(dir);
  ReadOptions opt;
  opt.expected_fingerprint = "fp-other";
  CHECK(reason(path, opt) == "model fingerprint mismatch: file has fp-0123456789abcdef, expected fp-other");
  VerifyResult v = verify(path, std::string("fp-other"));
  CHECK_FALSE(v.valid);
  CHECK_THAT(v.reason, Catch::StartsWith("model fingerprint mismatch"));
  CHECK(verify(path, std::string("fp-0123456789abcdef")).valid);
}

TEST_CASE("NaN or Inf in parameters is reported with its index", "[checkpoint][faults]") {
  test::TempDir dir;
  test::SampleCheckpoint sample;
  sample.w1[12345] = std::numeric_limits<float>::quiet_NaN();
  std::string nan_path = dir.str("nan.h5");
  checkpoint::write(nan_path, sample.view(), test::small_chunks());  // writing is allowed (for post-mortems)
  CHECK(reason(nan_path) == "parameter fc1/weight holds NaN at index 12345");
  ReadOptions lenient;
  lenient.check_finite = false;
  CHECK(std::isnan(checkpoint::read(nan_path, lenient).find(Section::params, "fc1/weight")->values<float>()[12345]));

  test::SampleCheckpoint inf_sample;
  inf_sample.conv[299] = -std::numeric_limits<float>::infinity();
  std::string inf_path = dir.str("inf.h5");
  checkpoint::write(inf_path, inf_sample.view());
  CHECK(reason(inf_path) == "parameter conv/weight holds Inf at index 299");
}

TEST_CASE("a write that fails part-way leaves neither the final file nor a temp file", "[checkpoint][faults]") {
  test::TempDir dir;
  test::SampleCheckpoint sample;
  std::string path = dir.str("ckpt-000000100.h5");
  fault_seam::arm_write(path, {20000, false});  // a few chunks in, as a full disk would
  try {
    checkpoint::write(path, sample.view(), test::small_chunks());
    FAIL("write did not fail");
  } catch (const CheckpointError& e) {
    CHECK(e.path() == path);
    CHECK_THAT(e.reason(), Catch::Contains("injected write failure after"));
  }
  CHECK(files_in(dir.path()).empty());
  // The same write without the failure succeeds afterwards.
  checkpoint::write(path, sample.view(), test::small_chunks());
  CHECK(verify(path).valid);
}

TEST_CASE("an unwritable run directory fails the write cleanly", "[checkpoint][faults]") {
  test::TempDir dir;
  test::SampleCheckpoint sample;
  fs::path locked = dir.path() / "worker-000";
  fs::create_directories(locked);
  ::chmod(locked.c_str(), 0555);
  // As root (as in CI containers) mode bits do not stop writes; then a path under a
  // regular file stands in for an unwritable folder: creating anything there fails.
  bool root_can_write = std::ofstream(locked / "probe").good();
  fs::remove(locked / "probe");
  fs::path target = locked;
  if (root_can_write) {
    test::write_text(dir.path() / "not-a-folder", "x");
    target = dir.path() / "not-a-folder";
  }
  std::string path = (target / "ckpt-000000100.h5").string();
  INFO("root: " << root_can_write << ", path " << path);
  try {
    checkpoint::write(path, sample.view());
    FAIL("write did not fail");
  } catch (const CheckpointError& e) {
    CHECK(e.path() == path);
    CHECK_THAT(e.reason(), Catch::Contains("cannot create HDF5 file"));
  }
  ::chmod(locked.c_str(), 0755);
  CHECK(files_in(locked).empty());
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("a missing file or a non-HDF5 file is reported, not crashed on", "[checkpoint][faults]") {
  test::TempDir dir;
  CHECK(reason(dir.str("ckpt-000000001.h5")) == "no such file");
  test::write_text(dir.path() / "ckpt-000000002.h5", "not an HDF5 file at all");
  CHECK_THAT(reason(dir.str("ckpt-000000002.h5")), Catch::Contains("cannot open as HDF5"));
}

TEST_CASE("big checkpoints (helper-thread pipeline) report failures the same way", "[checkpoint][faults]") {
  // Above 8 MiB the chunk work runs on a helper thread: its failures must still surface,
  // with the same reasons, and leave nothing behind.
  test::TempDir dir;
  std::vector<float> w(3 << 20);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 1001) - 500.0f;
  CheckpointView v;
  v.params = {TensorRef::of<float>("big/weight", {3 << 10, 1 << 10}, w.data())};
  WriteOptions o;
  o.chunk_elements = 1 << 17;  // 24 chunks
  std::string good = dir.str("good.h5");
  checkpoint::write(good, v, o);
  CheckpointData got = checkpoint::read(good);
  REQUIRE(got.params.size() == 1);
  CHECK(std::memcmp(got.params[0].data(), w.data(), w.size() * 4) == 0);

  std::string flipped = dir.str("flipped.h5");
  fs::copy_file(good, flipped);
  auto chunks = stored_extents(flipped, "/params/big/weight");
  REQUIRE(chunks.size() == 24);
  flip_byte(flipped, chunks[17].file_offset + 100);
  CHECK_THAT(reason(flipped), Catch::Contains("fletcher32 checksum mismatch in chunk") &&
                                  Catch::Contains("of /params/big/weight"));

  w[(3 << 20) - 5] = std::numeric_limits<float>::infinity();  // in the last (staged) chunk
  std::string inf = dir.str("inf.h5");
  checkpoint::write(inf, v, o);
  CHECK(reason(inf) == "parameter big/weight holds Inf at index " + std::to_string((3 << 20) - 5));

  fault_seam::arm_write(dir.str("failed.h5"), {5 << 20, false});
  CHECK_THROWS_WITH(checkpoint::write(dir.str("failed.h5"), v, o), Catch::Contains("injected write failure"));
  CHECK_FALSE(fs::exists(dir.path() / "failed.h5"));
  CHECK(files_in(dir.path()).size() == 3);  // good, flipped, inf: no temp file
}
