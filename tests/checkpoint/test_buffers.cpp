// Non-trainable buffers (/buffers, e.g. BatchNorm running statistics): round trips,
// integrity checks, and compatibility with files that have no /buffers group.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/edit.hpp"
#include "sample_checkpoint.hpp"
#include "support/process.hpp"

using namespace codistill;
using namespace codistill::checkpoint;
namespace fs = std::filesystem;

namespace {

// The sample checkpoint plus the buffers of a BatchNorm layer and of a 2-D module whose
// buffer spans several (padded) chunks with small_chunks().
struct SampleWithBuffers : test::SampleCheckpoint {
  std::vector<float> mean, var, count{5.0f}, table;

  explicit SampleWithBuffers(std::uint64_t seed = 1, std::int64_t step = 100) : SampleCheckpoint(seed, step) {
    for (int i = 0; i < 65; ++i) {
      mean.push_back(0.01f * static_cast<float>(i) - 0.3f + static_cast<float>(seed));
      var.push_back(1.0f + 0.02f * static_cast<float>(i));
    }
    for (int i = 0; i < 33 * 70; ++i)
      table.push_back(static_cast<float>((i * 7919 + static_cast<int>(seed)) % 1013) / 7.0f);
  }

  CheckpointView view() const {
    CheckpointView v = SampleCheckpoint::view();
    v.buffers = {TensorRef::of<float>("bn1/running_mean", {65}, mean.data()),
                 TensorRef::of<float>("bn1/running_var", {65}, var.data()),
                 TensorRef::of<float>("bn1/num_batches_tracked", {}, count.data()),  // a scalar: contiguous
                 TensorRef::of<float>("embed/table", {33, 70}, table.data())};
    return v;
  }
};

void check_equal(const CheckpointData& got, const CheckpointView& want) {
  CheckpointMeta meta = got.meta;
  meta.content_digest.clear();
  CHECK(meta == want.meta);
  for (Section s : kSections) {
    const auto& expect = want.section(s);
    const auto& have = got.section(s);
    INFO(section_group(s));
    REQUIRE(have.size() == expect.size());
    for (std::size_t i = 0; i < expect.size(); ++i) {
      INFO(section_group(s) << "/" << expect[i].name);
      CHECK(test::same_bytes(have[i], expect[i]));
    }
  }
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
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

// read()'s reason, checked to be verify()'s too.
std::string reason(const std::string& path, const ReadOptions& options = {}) {
  try {
    checkpoint::read(path, options);
  } catch (const CheckpointError& e) {
    if (options.direct_chunk_io) CHECK(verify(path).reason == e.reason());
    return e.reason();
  }
  FAIL("read did not throw for " << path);
  return {};
}

// h5dump -n without its first line (which names the file).
std::string object_listing(const std::string& path, const test::TempDir& dir) {
  auto r = test::run_command("/usr/bin/h5dump -n " + path, dir);
  REQUIRE(r.exit_code == 0);
  return r.out.substr(r.out.find('\n') + 1);
}

// A checkpoint written by codistill-train at commit 2130dbf, before /buffers existed:
// `codistill-train --config v1-no-buffers-2130dbf.yaml --run-dir run --set train.steps=5`
// (tests/checkpoint/data/README.md). An MLP [16 -> 8 -> 10] with SGD momentum.
const std::string kOldFile = std::string(CODISTILL_SOURCE_DIR) + "/tests/checkpoint/data/v1-no-buffers-2130dbf.h5";
const std::string kOldDigest = "19383797e55ec68b";

}  // namespace

TEST_CASE("buffers read back bit for bit, in the written order, between params and optimizer",
          "[checkpoint][buffers]") {
  test::TempDir dir;
  SampleWithBuffers sample;
  std::string path = dir.str("ckpt-000000100.h5");
  WriteResult w = checkpoint::write(path, sample.view(), test::small_chunks());
  CheckpointData got = checkpoint::read(path);
  check_equal(got, sample.view());
  CHECK(got.meta.content_digest == w.content_digest);
  CHECK(verify(path).valid);
  CHECK(std::string(section_group(Section::buffers)) == "buffers");
  const TensorValue* mean = got.find(Section::buffers, "bn1/running_mean");
  REQUIRE(mean != nullptr);
  CHECK(mean->real.shape() == kernels::Shape{65});
  CHECK(mean->values<float>()[64] == sample.mean[64]);
  CHECK(got.find(Section::buffers, "bn1/num_batches_tracked")->shape.empty());
  CHECK(got.find(Section::params, "bn1/running_mean") == nullptr);

  // The tensor list: section by section in the order params, buffers, optimizer, state.
  auto tensors = list_tensors(path);
  REQUIRE(tensors.size() == 14);
  CHECK(tensors[2].section == Section::params);
  CHECK(tensors[3].section == Section::buffers);
  CHECK(tensors[3].name == "bn1/running_mean");
  CHECK(tensors[6].name == "embed/table");
  CHECK(tensors[6].shape == kernels::Shape{33, 70});
  CHECK(tensors[6].type == ElemType::f32);
  CHECK(tensors[7].section == Section::optimizer);
  CHECK(tensors[9].section == Section::state);

  // Buffers are part of the content: the same params without them digest differently.
  CheckpointView without = sample.view();
  without.buffers.clear();
  CHECK(checkpoint::write(dir.str("without.h5"), without, test::small_chunks()).content_digest != w.content_digest);

  // Both chunk I/O paths agree (and write identical files) with buffers too.
  WriteOptions pipeline = test::small_chunks();
  pipeline.direct_chunk_io = false;
  auto p = checkpoint::write(dir.str("pipeline.h5"), sample.view(), pipeline);
  CHECK(p.content_digest == w.content_digest);
  CHECK(slurp(path) == slurp(dir.path() / "pipeline.h5"));
  ReadOptions via_pipeline;
  via_pipeline.direct_chunk_io = false;
  check_equal(checkpoint::read(dir.str("pipeline.h5"), via_pipeline), sample.view());
}

TEST_CASE("a teacher reads params and buffers, ReadOptions::buffers selects them", "[checkpoint][buffers]") {
  test::TempDir dir;
  SampleWithBuffers sample;
  std::string path = dir.str("ckpt-000000100.h5");
  checkpoint::write(path, sample.view(), test::small_chunks());
  ReadOptions teacher;
  teacher.optimizer = teacher.state = false;
  CheckpointData got = checkpoint::read(path, teacher);
  CHECK(got.params.size() == 3);
  CHECK(got.buffers.size() == 4);
  CHECK(got.optimizer.empty());
  CHECK(got.state.empty());
  ReadOptions no_buffers;
  no_buffers.buffers = false;
  got = checkpoint::read(path, no_buffers);
  CHECK(got.buffers.empty());
  CHECK(got.params.size() == 3);
  CHECK(got.state.size() == 5);
}

TEST_CASE("read_into, snapshot and snapshot_into reuse and copy buffers", "[checkpoint][buffers]") {
  test::TempDir dir;
  SampleWithBuffers a(1, 100), b(2, 200);
  checkpoint::write(dir.str("a.h5"), a.view(), test::small_chunks());
  checkpoint::write(dir.str("b.h5"), b.view(), test::small_chunks());
  CheckpointData data = checkpoint::read(dir.str("a.h5"));
  const void* table = data.find(Section::buffers, "embed/table")->data();
  checkpoint::read_into(dir.str("b.h5"), data);
  check_equal(data, b.view());
  CHECK(data.find(Section::buffers, "embed/table")->data() == table);  // same storage, new values

  // view() of what was read writes the same content again.
  auto again = checkpoint::write(dir.str("again.h5"), data.view(), test::small_chunks());
  CHECK(again.content_digest == data.meta.content_digest);

  CheckpointData snap = snapshot(a.view());
  check_equal(snap, a.view());
  const void* mean = snap.find(Section::buffers, "bn1/running_mean")->data();
  snapshot_into(b.view(), snap);
  check_equal(snap, b.view());
  CHECK(snap.find(Section::buffers, "bn1/running_mean")->data() == mean);
  a.mean[0] = 123.0f;  // the snapshot owns its copy
  CHECK(snapshot(a.view()).buffers[0].values<float>()[0] == 123.0f);
  CHECK(snap.buffers[0].values<float>()[0] == b.mean[0]);
}

TEST_CASE("a checkpoint without buffers has no /buffers group", "[checkpoint][buffers]") {
  REQUIRE(fs::exists("/usr/bin/h5dump"));
  test::TempDir dir;
  test::SampleCheckpoint plain;
  std::string path = dir.str("plain.h5");
  checkpoint::write(path, plain.view(), test::small_chunks());
  std::string listing = object_listing(path, dir);
  CHECK_THAT(listing, Catch::Contains("group      /params\n"));
  CHECK_THAT(listing, Catch::Contains("group      /optimizer\n"));
  CHECK_THAT(listing, Catch::Contains("group      /state\n"));
  CHECK_THAT(listing, !Catch::Contains("buffers"));
  CHECK(checkpoint::read(path).buffers.empty());

  // With buffers the group is there; a view with empty `buffers` is the plain file again.
  SampleWithBuffers with;
  checkpoint::write(dir.str("with.h5"), with.view(), test::small_chunks());
  CHECK_THAT(object_listing(dir.str("with.h5"), dir), Catch::Contains("group      /buffers\n"));
}

TEST_CASE("a file written before /buffers existed reads back valid, with no buffers", "[checkpoint][buffers]") {
  REQUIRE(fs::exists(kOldFile));
  CHECK(verify(kOldFile).valid);
  CheckpointData old = checkpoint::read(kOldFile);
  CHECK(old.meta.step == 5);
  CHECK(old.meta.worker == 0);
  CHECK(old.meta.content_digest == kOldDigest);
  CHECK(old.buffers.empty());
  REQUIRE(old.params.size() == 4);
  CHECK(old.params[0].name == "fc1/weight");
  CHECK(old.params[0].shape == kernels::Shape{8, 16});
  CHECK(old.optimizer.size() == 4);
  CHECK(old.find(Section::state, "optimizer/step")->values<std::int64_t>()[0] == 5);
  for (const auto& t : list_tensors(kOldFile)) CHECK(t.section != Section::buffers);
  // A teacher's read (params and buffers) and a reload into earlier storage work too.
  ReadOptions teacher;
  teacher.optimizer = teacher.state = false;
  CheckpointData t = checkpoint::read(kOldFile, teacher);
  CHECK(t.params.size() == 4);
  CHECK(t.buffers.empty());
  SampleWithBuffers other;
  CheckpointData reuse = snapshot(other.view());
  checkpoint::read_into(kOldFile, reuse);
  CHECK(reuse.buffers.empty());
  CHECK(reuse.params.size() == 4);

  CHECK(old.meta.content_digest_algorithm == "xxh64");  // no content_digest_algorithm attribute

  // Its content written again by this version with XXH64: same digest, same objects, no
  // /buffers. With XXH3 (the default) the digest differs and names its algorithm.
  test::TempDir dir;
  std::string copy = dir.str("rewritten.h5");
  WriteOptions as_before;
  as_before.digest_algorithm = DigestAlgorithm::xxh64;
  CHECK(checkpoint::write(copy, old.view(), as_before).content_digest == kOldDigest);
  CHECK(object_listing(copy, dir) == object_listing(kOldFile, dir));
  CHECK(checkpoint::read(copy).meta.content_digest_algorithm == "xxh64");
  auto now = checkpoint::write(dir.str("xxh3.h5"), old.view());
  CHECK(now.content_digest != kOldDigest);
  CHECK(checkpoint::read(dir.str("xxh3.h5")).meta.content_digest_algorithm == "xxh3-64");
}

TEST_CASE("a damaged buffer is caught: fletcher32 in chunks, the digest elsewhere", "[checkpoint][buffers]") {
  test::TempDir dir;
  SampleWithBuffers sample;
  std::string path = dir.str("ckpt-000000100.h5");
  checkpoint::write(path, sample.view(), test::small_chunks());
  REQUIRE(verify(path).valid);

  std::string chunked = dir.str("chunked.h5");
  fs::copy_file(path, chunked);
  auto chunks = stored_extents(chunked, "/buffers/embed/table");
  REQUIRE(chunks.size() == 3);  // 33 rows of 70 in chunks of 11 rows (1000 elements at most)
  flip_byte(chunked, chunks[1].file_offset + 17);
  CHECK(reason(chunked) == "corrupt data: fletcher32 checksum mismatch in chunk 1 of /buffers/embed/table");
  ReadOptions pipeline;
  pipeline.direct_chunk_io = false;
  CHECK_THAT(reason(chunked, pipeline), Catch::Contains("/buffers/embed/table") && Catch::Contains("Fletcher32"));
  // A reader that skips buffers still checks them (the digest covers every dataset).
  ReadOptions teacher_without_buffers;
  teacher_without_buffers.buffers = teacher_without_buffers.optimizer = teacher_without_buffers.state = false;
  CHECK_THAT(reason(chunked, teacher_without_buffers), Catch::Contains("/buffers/embed/table"));

  // The scalar is stored contiguous, without a checksum: the content digest catches it.
  std::string scalar = dir.str("scalar.h5");
  fs::copy_file(path, scalar);
  auto extent = stored_extents(scalar, "/buffers/bn1/num_batches_tracked");
  REQUIRE(extent.size() == 1);
  REQUIRE(extent[0].bytes == 4);
  flip_byte(scalar, extent[0].file_offset + 1);
  CHECK_THAT(reason(scalar), Catch::StartsWith("content digest mismatch: stored "));
}

TEST_CASE("NaN or Inf in a buffer is rejected like in a parameter", "[checkpoint][buffers]") {
  test::TempDir dir;
  SampleWithBuffers sample;
  sample.var[3] = std::numeric_limits<float>::quiet_NaN();
  std::string nan_path = dir.str("nan.h5");
  checkpoint::write(nan_path, sample.view(), test::small_chunks());  // writing is allowed (post-mortems)
  CHECK(reason(nan_path) == "buffer bn1/running_var holds NaN at index 3");
  ReadOptions lenient;
  lenient.check_finite = false;
  CHECK(std::isnan(checkpoint::read(nan_path, lenient).find(Section::buffers, "bn1/running_var")->values<float>()[3]));

  SampleWithBuffers inf_sample;
  inf_sample.table[33 * 70 - 1] = std::numeric_limits<float>::infinity();  // in the last (staged) chunk
  std::string inf_path = dir.str("inf.h5");
  checkpoint::write(inf_path, inf_sample.view(), test::small_chunks());
  CHECK(reason(inf_path) == "buffer embed/table holds Inf at index " + std::to_string(33 * 70 - 1));
}

TEST_CASE("write checks buffers like params", "[checkpoint][buffers]") {
  test::TempDir dir;
  SampleWithBuffers sample;
  std::string path = dir.str("ckpt-000000100.h5");
  auto message = [&](const CheckpointView& v) {
    try {
      checkpoint::write(path, v);
    } catch (const CheckpointError& e) {
      CHECK_FALSE(fs::exists(path));
      return e.reason();
    }
    FAIL("write did not throw");
    return std::string();
  };
  CheckpointView v = sample.view();
  v.buffers.push_back(v.buffers[0]);
  CHECK_THAT(message(v), Catch::Contains("duplicate buffers tensor 'bn1/running_mean'"));
  v = sample.view();
  v.buffers[1].type = ElemType::f64;
  CHECK_THAT(message(v), Catch::Contains("buffers tensor 'bn1/running_var' is float64; buffers are float32"));
  v = sample.view();
  v.buffers.push_back(TensorRef::of<float>("bn1", {1}, sample.count.data()));
  CHECK_THAT(message(v), Catch::Contains("is also the group of"));
  v = sample.view();
  v.buffers[0].name = "bn1/../x";
  CHECK_THAT(message(v), Catch::Contains("empty, '.' or '..' component"));
  // The same name in params and in buffers is fine: they are different groups.
  v = sample.view();
  v.buffers.push_back(TensorRef::of<float>("fc1/bias", {65}, sample.b1.data()));
  checkpoint::write(path, v);
  CHECK(checkpoint::read(path).find(Section::buffers, "fc1/bias") != nullptr);
}

TEST_CASE("h5dump reads a checkpoint with buffers", "[checkpoint][buffers]") {
  REQUIRE(fs::exists("/usr/bin/h5dump"));
  test::TempDir dir;
  SampleWithBuffers sample;
  std::string path = dir.str("ckpt-000000100.h5");
  checkpoint::write(path, sample.view(), test::small_chunks());
  std::string listing = object_listing(path, dir);
  CHECK_THAT(listing, Catch::Contains("dataset    /buffers/bn1/running_mean\n"));
  CHECK_THAT(listing, Catch::Contains("dataset    /buffers/embed/table\n"));
  // Reading the data runs HDF5's own fletcher32 check.
  auto data = test::run_command("/usr/bin/h5dump -p -d /buffers/embed/table -d /buffers/bn1/running_var " + path, dir);
  CHECK(data.exit_code == 0);
  CHECK_THAT(data.out, Catch::Contains("H5T_IEEE_F32LE"));
  CHECK_THAT(data.out, Catch::Contains("CHUNKED ( 11, 70 )"));
  CHECK_THAT(data.out, Catch::Contains("FLETCHER32"));
  CHECK_THAT(data.out, Catch::Contains("(0): 1, 1.02, 1.04"));
}

TEST_CASE("big buffers (helper-thread pipeline) read back and report damage", "[checkpoint][buffers]") {
  // Above 8 MiB the chunk checks run on a helper thread: buffers go through it too.
  test::TempDir dir;
  std::vector<float> w(3 << 20), stat(3 << 20);
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i] = static_cast<float>(i % 1001) - 500.0f;
    stat[i] = static_cast<float>(i % 977) * 0.25f;
  }
  CheckpointView v;
  v.params = {TensorRef::of<float>("big/weight", {3 << 10, 1 << 10}, w.data())};
  v.buffers = {TensorRef::of<float>("big/stat", {3 << 10, 1 << 10}, stat.data())};
  WriteOptions o;
  o.chunk_elements = 1 << 17;  // 24 chunks each
  std::string good = dir.str("good.h5");
  checkpoint::write(good, v, o);
  CheckpointData got = checkpoint::read(good);
  REQUIRE(got.buffers.size() == 1);
  CHECK(std::memcmp(got.buffers[0].data(), stat.data(), stat.size() * 4) == 0);

  std::string flipped = dir.str("flipped.h5");
  fs::copy_file(good, flipped);
  auto chunks = stored_extents(flipped, "/buffers/big/stat");
  REQUIRE(chunks.size() == 24);
  flip_byte(flipped, chunks[9].file_offset + 100);
  CHECK(reason(flipped) == "corrupt data: fletcher32 checksum mismatch in chunk 9 of /buffers/big/stat");

  stat[(3 << 20) - 5] = -std::numeric_limits<float>::infinity();  // in the last (staged) chunk
  std::string inf = dir.str("inf.h5");
  checkpoint::write(inf, v, o);
  CHECK(reason(inf) == "buffer big/stat holds Inf at index " + std::to_string((3 << 20) - 5));
}
