// Teacher files (docs/checkpoint-format.md, "Teacher files"): params and buffers only, in
// float32 or bfloat16, with their own content digest; listed, loaded and retained by the
// run-directory store beside the checkpoints.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <filesystem>
#include <limits>

#include "checkpoint/naming.hpp"
#include "checkpoint/store.hpp"
#include "kernels/cpu/bf16.hpp"
#include "sample_checkpoint.hpp"
#include "support/process.hpp"

using namespace codistill;
using namespace codistill::checkpoint;
namespace fs = std::filesystem;

namespace {

// The sample checkpoint with buffers, one of them a scalar (stored contiguous, unchunked).
struct WithBuffers {
  test::SampleCheckpoint sample;
  std::vector<float> mean = std::vector<float>(37), var{0.25f};
  explicit WithBuffers(std::int64_t step = 100) : sample(static_cast<std::uint64_t>(step), step) {
    for (std::size_t i = 0; i < mean.size(); ++i) mean[i] = 0.1f * static_cast<float>(i) - 1.7f;
  }
  CheckpointView view() const {
    CheckpointView v = sample.view();
    v.buffers = {TensorRef::of<float>("bn/running_mean", {37}, mean.data()),
                 TensorRef::of<float>("bn/running_var", {}, var.data())};
    return v;
  }
};

WriteOptions scratch(WriteOptions o = test::small_chunks()) {
  o.fsync = false;
  return o;
}

// Each float of `got` is `want` rounded to bfloat16 (or equal, for float32 files).
void check_values(const std::vector<TensorValue>& got, const std::vector<TensorRef>& want, bool bf16) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(want[i].name);
    CHECK(got[i].name == want[i].name);
    CHECK(got[i].shape == want[i].shape);
    REQUIRE(got[i].type == ElemType::f32);
    auto v = got[i].values<float>();
    auto w = static_cast<const float*>(want[i].data);
    std::size_t wrong = 0;
    for (std::size_t k = 0; k < v.size(); ++k)
      wrong += v[k] != (bf16 ? kernels::cpu::bf16_rounded(w[k]) : w[k]);
    CHECK(wrong == 0);
  }
}

}  // namespace

TEST_CASE("teacher file names", "[checkpoint][teacher_files]") {
  CHECK(teacher_file_name(1000) == "teacher-000001000.h5");
  CHECK(parse_teacher_file_name("teacher-000001000.h5") == 1000);
  CHECK_FALSE(parse_teacher_file_name("ckpt-000001000.h5"));
  CHECK_FALSE(parse_checkpoint_file_name("teacher-000001000.h5"));
  CHECK(parse_temp_file_pid(".teacher-000001000.h5.tmp.4321") == 4321);
  CHECK_FALSE(parse_temp_file_pid(".teacher-x.h5.tmp.4321"));
}

TEST_CASE("a float32 teacher file holds the checkpoint's params and buffers, bit for bit",
          "[checkpoint][teacher_files]") {
  test::TempDir dir;
  WithBuffers c;
  const std::string ckpt = (dir.path() / "ckpt-000000100.h5").string();
  const std::string teacher = (dir.path() / "teacher-000000100.h5").string();
  write(ckpt, c.view(), scratch());
  WriteResult r = write_teacher(teacher, c.view(), ElemType::f32, scratch());
  CHECK(verify(teacher).valid);
  CheckpointData full = read(ckpt), t = read(teacher);
  CHECK(t.meta.step == 100);
  CHECK(t.meta.model == c.sample.meta.model);
  CHECK(t.meta.model_fingerprint == c.sample.meta.model_fingerprint);
  CHECK(t.meta.teacher_steps == c.sample.meta.teacher_steps);
  CHECK(t.meta.content_digest == r.content_digest);
  CHECK(t.meta.content_digest != full.meta.content_digest);  // it covers less
  CHECK(t.optimizer.empty());
  CHECK(t.state.empty());
  check_values(t.params, c.view().params, false);
  check_values(t.buffers, c.view().buffers, false);
  // What a teacher reads: everything in the teacher file, the whole checkpoint otherwise.
  ReadOptions teacher_only;
  teacher_only.optimizer = teacher_only.state = false;
  CHECK(read(teacher, teacher_only).bytes_read < read(ckpt, teacher_only).bytes_read);
  CHECK(read(ckpt, teacher_only).bytes_read == full.bytes_read);
}

TEST_CASE("a bf16 teacher file holds params and buffers rounded to bfloat16, read back as float32",
          "[checkpoint][teacher_files]") {
  test::TempDir dir;
  WithBuffers c;
  const std::string f32 = (dir.path() / "f32.h5").string(), bf = (dir.path() / "bf16.h5").string();
  write_teacher(f32, c.view(), ElemType::f32, scratch());
  WriteResult r = write_teacher(bf, c.view(), ElemType::bf16, scratch());
  CHECK(verify(bf).valid);
  for (const auto& info : list_tensors(bf)) {
    INFO(info.name);
    CHECK(info.type == ElemType::bf16);
  }
  for (bool direct : {true, false}) {
    INFO("direct chunk I/O " << direct);
    ReadOptions o;
    o.direct_chunk_io = direct;
    CheckpointData t = read(bf, o);
    CHECK(t.meta.content_digest == r.content_digest);
    check_values(t.params, c.view().params, true);
    check_values(t.buffers, c.view().buffers, true);
    CHECK(t.bytes_read < read(f32, o).bytes_read);
  }
  // HDF5's filter pipeline writes the same file content (and so the same digest).
  const std::string piped = (dir.path() / "piped.h5").string();
  WriteOptions o = scratch();
  o.direct_chunk_io = false;
  CHECK(write_teacher(piped, c.view(), ElemType::bf16, o).content_digest == r.content_digest);
  // read_into reuses float32 storage.
  CheckpointData reuse = read(bf);
  const void* before = reuse.params[0].data();
  read_into(bf, reuse);
  CHECK(reuse.params[0].data() == before);
}

TEST_CASE("broken teacher files are refused", "[checkpoint][teacher_files]") {
  test::TempDir dir;
  WithBuffers c;
  for (ElemType type : {ElemType::f32, ElemType::bf16}) {
    INFO(elem_name(type));
    const std::string path = (dir.path() / (std::string("t-") + elem_name(type) + ".h5")).string();
    write_teacher(path, c.view(), type, scratch());
    fs::resize_file(path, fs::file_size(path) - 100);
    VerifyResult v = verify(path);
    CHECK_FALSE(v.valid);
    CHECK_THROWS_AS(read(path), CheckpointError);
  }
  // A NaN is refused in bfloat16 as in float32, at its index.
  WithBuffers nan;
  nan.sample.w1[77] = std::numeric_limits<float>::quiet_NaN();
  const std::string path = (dir.path() / "nan.h5").string();
  write_teacher(path, nan.view(), ElemType::bf16, scratch());
  CHECK_THAT(verify(path).reason, Catch::Contains("parameter fc1/weight holds NaN at index 77"));
  // Optimizer slots stay float32: a checkpoint cannot hold bfloat16 but where a teacher file does.
  WriteOptions o = scratch();
  o.model_type = ElemType::f64;
  CHECK_THROWS_WITH(write((dir.path() / "x.h5").string(), c.view(), o), Catch::Contains("cannot be stored as float64"));
}

TEST_CASE("write_teacher replaces a leftover of the same step", "[checkpoint][teacher_files]") {
  test::TempDir dir;
  WithBuffers a(100), b(100);
  b.sample.w1[0] += 1.0f;
  const std::string path = (dir.path() / "teacher-000000100.h5").string();
  write_teacher(path, a.view(), ElemType::f32, scratch());
  WriteResult r = write_teacher(path, b.view(), ElemType::f32, scratch());
  CHECK(read_meta(path).content_digest == r.content_digest);
  CHECK(read(path).params[0].values<float>()[0] == b.sample.w1[0]);
}

TEST_CASE("the store lists, loads and retains teacher files with their checkpoints", "[checkpoint][teacher_files]") {
  test::TempDir dir;
  RunStore store(dir.path().string());
  fs::create_directories(store.worker_dir(0));
  for (std::int64_t step : {100, 200, 300, 400}) {
    WithBuffers c(step);
    write_teacher(store.teacher_path(0, step), c.view(), ElemType::bf16, scratch());
    if (step != 400) write(store.checkpoint_path(0, step), c.view(), scratch());  // 400: being published
  }
  write_teacher(store.teacher_path(0, 50), WithBuffers(50).view(), ElemType::f32, scratch());  // an orphan
  CHECK(store.teacher_files(0).size() == 5);
  CHECK(store.checkpoints(0).size() == 3);
  CHECK(store.teacher_files(0).back().kind == FileKind::teacher);

  // The freshest valid one, falling back past a broken one; none at or before after_step.
  fs::resize_file(store.teacher_path(0, 400), 1000);
  auto loaded = store.load_freshest(0, {}, {}, FileKind::teacher);
  REQUIRE(loaded);
  CHECK(loaded->file.step == 300);
  CHECK(loaded->file.kind == FileKind::teacher);
  CHECK(loaded->skipped.size() == 1);
  CHECK_FALSE(store.load_freshest(0, {}, {}, FileKind::teacher, 300));
  CHECK(store.load_freshest(0, {}, 200, FileKind::teacher)->file.step == 200);

  // keep 2: checkpoints 100 goes, and teacher files 50 and 100 with it; 400 (newer than
  // every checkpoint) stays.
  store.retain(0, 2, 300);
  std::vector<std::int64_t> teachers;
  for (const auto& f : store.teacher_files(0)) teachers.push_back(f.step);
  CHECK(teachers == std::vector<std::int64_t>{200, 300, 400});
  CHECK(store.checkpoints(0).size() == 2);

  // A dead writer's temp teacher file is cleaned up like a checkpoint's.
  const std::string tmp = (fs::path(store.worker_dir(0)) / ".teacher-000000500.h5.tmp.999999999").string();
  std::ofstream(tmp) << "x";
  auto removed = store.cleanup_temp_files(0);
  CHECK(std::find(removed.begin(), removed.end(), tmp) != removed.end());
}
