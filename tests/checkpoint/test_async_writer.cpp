// The asynchronous writer: snapshots are owned, writes are reported, wait/skip when busy.
#include <catch2/catch.hpp>

#include <filesystem>
#include <future>

#include "checkpoint/async_writer.hpp"
#include "checkpoint/store.hpp"
#include "sample_checkpoint.hpp"
#include "support/process.hpp"

using namespace codistill;
using namespace codistill::checkpoint;
namespace fs = std::filesystem;

TEST_CASE("an asynchronous write publishes the snapshot, not later changes", "[checkpoint][async]") {
  test::TempDir dir;
  RunStore store(dir.str("run"));
  fs::create_directories(store.worker_dir(0));
  test::SampleCheckpoint sample(3, 100);
  CheckpointData snap = snapshot(sample.view());
  sample.w1[0] = 12345.0f;  // training goes on and changes the parameters
  AsyncWriter writer;
  std::int64_t published = -1;
  WriteJob job{store.checkpoint_path(0, 100), std::move(snap), {}, [&](const WriteResult&) { published = 100; }};
  CHECK(writer.submit(std::move(job)));
  auto outcomes = writer.wait();
  REQUIRE(outcomes.size() == 1);
  CHECK(outcomes[0].ok);
  CHECK(outcomes[0].error.empty());
  CHECK(outcomes[0].step == 100);
  CHECK(outcomes[0].result.bytes > 0);
  CHECK(published == 100);
  CheckpointData got = checkpoint::read(store.checkpoint_path(0, 100));
  CHECK(got.find(Section::params, "fc1/weight")->values<float>()[0] != 12345.0f);
  CHECK(writer.poll().empty());
}

TEST_CASE("a snapshot can own tensors without copying them", "[checkpoint][async]") {
  auto t = kernels::Tensor::from_vector({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  const void* buffer = t.raw();
  TensorValue v = TensorValue::from_tensor("fc/weight", std::move(t));
  CHECK(v.data() == buffer);
  CHECK(v.shape == kernels::Shape{2, 3});
  CHECK(v.type == ElemType::f32);
  CHECK(v.values<float>()[5] == 6.0f);
  CHECK_THROWS_AS(TensorValue::from_tensor("x", kernels::Tensor::zeros({2}, kernels::DType::bf16)),
                  std::invalid_argument);
}

TEST_CASE("snapshot_sharing shares what lies in the given blocks and copies the rest", "[checkpoint][async]") {
  auto block = kernels::Tensor::from_vector({8}, std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7});
  std::vector<float> other{9, 8};
  CheckpointView view;
  view.params.push_back(TensorRef::of<float>("a/weight", {2, 2}, block.data<float>() + 2));
  view.params.push_back(TensorRef::of<float>("b/weight", {2}, other.data()));
  view.optimizer.push_back(TensorRef::of<float>("a/weight/momentum", {4}, block.data<float>() + 4));
  CheckpointData d = snapshot_sharing(view, {block});
  REQUIRE(d.params.size() == 2);
  CHECK(d.params[0].data() == block.data<float>() + 2);  // shared
  CHECK(d.params[0].shape == kernels::Shape{2, 2});
  CHECK(d.params[0].values<float>()[3] == 5.0f);
  CHECK(d.optimizer[0].data() == block.data<float>() + 4);
  CHECK(d.params[1].data() != other.data());  // copied
  other[0] = -1;
  CHECK(d.params[1].values<float>()[0] == 9.0f);
  block = kernels::Tensor();  // the snapshot keeps the block alive
  CHECK(d.optimizer[0].values<float>()[3] == 7.0f);
  // With copies, the views are of the copy at the same place.
  auto live = kernels::Tensor::from_vector({8}, std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7});
  const kernels::Tensor copy = live.clone();
  CheckpointView on_live;
  on_live.params.push_back(TensorRef::of<float>("a/weight", {2, 2}, live.data<float>() + 2));
  const std::vector<kernels::Tensor> copies{copy};
  CheckpointData c = snapshot_sharing(on_live, {live}, &copies);
  CHECK(c.params[0].data() == copy.data<float>() + 2);
  CHECK_THROWS_AS(snapshot_sharing(on_live, {live, copy}, &copies), std::invalid_argument);
  // Inside a block but of another element type: copied, not reinterpreted.
  auto wide = kernels::Tensor::zeros({4}, kernels::DType::f64);
  CheckpointView ints;
  ints.state.push_back(TensorRef::of<std::int64_t>("sampler/position", {2}, static_cast<std::int64_t*>(wide.raw())));
  CheckpointData i = snapshot_sharing(ints, {wide});
  CHECK(i.state[0].type == ElemType::i64);
  CHECK(i.state[0].data() != wide.raw());
}

TEST_CASE("a busy writer waits or skips, and failures come back as outcomes", "[checkpoint][async]") {
  test::TempDir dir;
  test::SampleCheckpoint sample;
  AsyncWriter writer;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  // The first job holds the writer thread in after_publish until released.
  WriteJob slow{dir.str("ckpt-000000001.h5"), snapshot(sample.view()), {}, [released](const WriteResult&) {
                  released.wait();
                  throw std::runtime_error("retention failed");
                }};
  CHECK(writer.submit(std::move(slow)));
  CHECK(writer.busy());
  WriteJob skipped{dir.str("ckpt-000000002.h5"), snapshot(sample.view()), {}, {}};
  CHECK_FALSE(writer.submit(std::move(skipped), false));  // on_busy: skip
  release.set_value();
  test::write_text(dir.path() / "file", "x");
  WriteJob failing{dir.str("file/ckpt-000000003.h5"), snapshot(sample.view()), {}, {}};
  CHECK(writer.submit(std::move(failing)));  // on_busy: wait
  auto outcomes = writer.wait();
  REQUIRE(outcomes.size() == 2);
  CHECK(outcomes[0].ok);
  CHECK(outcomes[0].after_error == "retention failed");
  CHECK_FALSE(outcomes[1].ok);
  CHECK_THAT(outcomes[1].error, Catch::Contains("ckpt-000000003.h5") && Catch::Contains("cannot create HDF5 file"));
  CHECK_FALSE(writer.busy());
  CHECK(fs::exists(dir.path() / "ckpt-000000001.h5"));
  CHECK_FALSE(fs::exists(dir.path() / "ckpt-000000002.h5"));
}
