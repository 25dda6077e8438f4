// A worker's state through checkpoint format v1 and back: parameters, buffers (written to
// /buffers and restored), optimizer slots; a checkpoint without the buffers a model has is
// refused naming the buffer.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint.hpp"
#include "codistill/data/synthetic.hpp"
#include "codistill/persist/worker_state.hpp"
#include "codistill/nn/layers/linear.hpp"
#include "codistill/util/rng.hpp"
#include "support/buffer_layer.hpp"
#include "support/process.hpp"

using namespace codistill;
using codistill::kernels::Tensor;

namespace {

Model model_with_buffer(std::uint64_t seed, float fill) {
  Rng rng(seed);
  Model m;
  m.add("fc", [&] {
    auto l = std::make_unique<Linear>(4, 3);
    l->init_params(rng, "kaiming_uniform");
    return l;
  }());
  auto b = std::make_unique<test::WithBuffer>(3);
  for (int i = 0; i < 3; ++i) b->running().data<float>()[i] = fill + static_cast<float>(i);
  m.add("stats", std::move(b));
  m.finalize();
  return m;
}

struct Worker {
  data::Splits splits;
  Model model;
  std::unique_ptr<Optimizer> opt;
  std::unique_ptr<data::BatchSampler> sampler;
  std::unique_ptr<ImageBatchSource> source;
  WorkerState w;
  Worker(std::uint64_t seed, float fill) : model(model_with_buffer(seed, fill)) {
    DataConfig dc;
    dc.kind = "synthetic";
    dc.synthetic_train = 64;
    dc.synthetic_test = 16;
    dc.synthetic_shape = {1, 2, 2};
    splits = data::make_synthetic(dc);
    OptimizerConfig oc;
    oc.kind = "adamw";
    opt = make_optimizer(oc, model);
    data::SamplerOptions so;
    so.batch_size = 8;
    sampler = std::make_unique<data::BatchSampler>(splits.train, so);
    w.model = &model;
    w.optimizer = opt.get();
    source = std::make_unique<ImageBatchSource>(splits.train, *sampler);
    w.source = source.get();
    w.model_yaml = "kind: test\n";
    w.config_yaml = "{}\n";
  }
};

std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

}  // namespace

TEST_CASE("buffers go to /buffers and come back with restore_state", "[persist][checkpoint]") {
  test::TempDir dir;
  Worker a(1, 10.0f), b(2, -5.0f);
  a.w.step = 7;
  const std::string path = dir.str("ckpt.h5");
  checkpoint::write(path, make_state_view(a.w).view);
  auto data = checkpoint::read(path);
  REQUIRE(data.buffers.size() == 2);
  CHECK(data.buffers[0].name == "stats/running");
  CHECK(data.buffers[1].name == "stats/count");

  restore_state(b.w, data);
  CHECK(values(*b.model.buffers()[0].value) == std::vector<float>{10.0f, 11.0f, 12.0f});
  CHECK(values(b.model.arena().values()) == values(a.model.arena().values()));
  CHECK(b.w.step == 7);
  for (auto& [path2, slots] : a.opt->state())
    for (auto& [slot, t] : slots) CHECK(values(*b.opt->state().at(path2).at(slot)) == values(*t));
}

TEST_CASE("a checkpoint without the model's buffers is refused naming the buffer", "[persist][checkpoint]") {
  test::TempDir dir;
  Worker a(1, 1.0f);
  StateView sv = make_state_view(a.w);
  sv.view.buffers.clear();
  const std::string path = dir.str("nobuf.h5");
  checkpoint::write(path, sv.view);
  Worker b(2, 0.0f);
  CHECK_THROWS_WITH(restore_state(b.w, checkpoint::read(path)),
                    Catch::Matchers::Contains("/buffers/stats/running"));
}

// The asynchronous checkpoint copies the state view behind the next step's phases 1-6, and
// a BatchNorm forward (phase 3) writes its running statistics then: the view must hold the
// buffers as they were when it was made, not the live block (a race that made kill -9
// resumes of BatchNorm models differ from an uninterrupted run).
TEST_CASE("a state view holds the buffers as they were when it was made",
          "[persist][checkpoint]") {
  Worker a(1, 10.0f);
  StateView sv = make_state_view(a.w);
  Tensor& live = *a.model.buffers()[0].value;
  for (int i = 0; i < 3; ++i) live.data<float>()[i] = -1.0f;  // the next step's forward
  auto snap = checkpoint::snapshot(sv.view);
  const auto* running = snap.find(checkpoint::Section::buffers, "stats/running");
  REQUIRE(running != nullptr);
  CHECK(values(running->real) == std::vector<float>{10.0f, 11.0f, 12.0f});
}
