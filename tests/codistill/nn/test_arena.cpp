// The parameter arena: one aligned block for values, one for gradients, one for buffers;
// modules' tensors are views into them; moves and conversions keep values; the optimizer
// updates the whole block and never touches buffers.
#include <catch2/catch.hpp>

#include <cstdint>

#include "codistill/models/model.hpp"
#include "codistill/nn/layers/linear.hpp"
#include "codistill/optim/optimizer.hpp"
#include "codistill/util/rng.hpp"
#include "support/buffer_layer.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using codistill::kernels::DType;
using codistill::kernels::Shape;
using codistill::kernels::Tensor;

namespace {

Model small_model(std::uint64_t seed) {
  Rng rng(seed);
  Model m;
  auto fc1 = std::make_unique<Linear>(5, 3);
  fc1->init_params(rng, "kaiming_uniform");
  m.add("fc1", std::move(fc1));
  auto buf = std::make_unique<test::WithBuffer>(3);
  for (int i = 0; i < 3; ++i) buf->running().data<float>()[i] = 0.5f + static_cast<float>(i);
  m.add("stats", std::move(buf));
  auto fc2 = std::make_unique<Linear>(3, 2, /*bias=*/false);
  fc2->init_params(rng, "kaiming_uniform");
  m.add("fc2", std::move(fc2));
  m.finalize();
  return m;
}

std::vector<float> copy_of(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

}  // namespace

TEST_CASE("the arena holds every parameter, gradient and buffer in one aligned block each", "[nn][arena]") {
  Model m = small_model(1);
  ParamArena& a = m.arena();
  const auto& entries = a.param_entries();
  REQUIRE(entries.size() == 3);
  CHECK(entries[0].path == "fc1/weight");
  CHECK(entries[1].path == "fc1/bias");
  CHECK(entries[2].path == "fc2/weight");
  CHECK(a.num_params() == 15 + 3 + 6);
  for (const auto& e : entries) CHECK(e.offset % 16 == 0);  // 64 bytes of float32
  auto params = m.params();
  for (std::size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].path);
    CHECK(params[i].value->raw() == a.values().data<float>() + entries[i].offset);
    CHECK(params[i].grad->raw() == a.grads().data<float>() + entries[i].offset);
  }
  REQUIRE(a.buffer_entries().size() == 2);
  CHECK(a.buffer_entries()[0].path == "stats/running");
  auto buffers = m.buffers();
  CHECK(buffers[0].value->raw() == a.buffers().data<float>());
  CHECK(copy_of(*buffers[0].value) == std::vector<float>{0.5f, 1.5f, 2.5f});
  // Padding between entries is zero.
  const float* v = a.values().data<float>();
  for (std::int64_t i = entries[0].numel; i < entries[1].offset; ++i) CHECK(v[i] == 0.0f);
}

TEST_CASE("one optimizer op updates the whole arena, buffers untouched, zero_grad zeroes it", "[nn][arena]") {
  Model m = small_model(2);
  OptimizerConfig cfg;
  cfg.kind = "sgd";
  cfg.momentum = 0.9;
  cfg.weight_decay = 0.1;
  auto opt = make_optimizer(cfg, m);
  ParamArena& a = m.arena();
  const std::vector<float> before = copy_of(a.values());
  const std::vector<float> buffers = copy_of(a.buffers());
  float* g = a.grads().data<float>();
  for (const auto& e : a.param_entries())
    for (std::int64_t i = 0; i < e.numel; ++i) g[e.offset + i] = 0.25f;
  opt->step(0.1);
  const std::vector<float> after = copy_of(a.values());
  for (const auto& e : a.param_entries())
    for (std::int64_t i = 0; i < e.numel; ++i) {
      const auto k = static_cast<std::size_t>(e.offset + i);
      CHECK(after[k] == Approx(before[k] - 0.1f * (0.25f + 0.1f * before[k])));
    }
  CHECK(copy_of(a.buffers()) == buffers);
  // Padding stays zero (zero value, zero gradient).
  for (std::int64_t i = a.param_entries()[0].numel; i < a.param_entries()[1].offset; ++i)
    CHECK(after[static_cast<std::size_t>(i)] == 0.0f);
  m.zero_grad();
  for (float x : copy_of(a.grads())) CHECK(x == 0.0f);
  // Momentum slots are views laid out like the arena.
  auto state = opt->state();
  REQUIRE(state.count("fc2/weight") == 1);
  CHECK(state.at("fc2/weight").at("momentum")->shape() == Shape{2, 3});
}

TEST_CASE("to_dtype keeps values and rebinds the views, drop_grads makes a forward-only model", "[nn][arena]") {
  Model m = small_model(3);
  const std::vector<float> values = copy_of(m.arena().values());
  m.to_dtype(DType::f64);
  CHECK(m.arena().values().dtype() == DType::f64);
  for (auto& p : m.params()) CHECK(p.value->dtype() == DType::f64);
  for (auto& b : m.buffers()) CHECK(b.value->dtype() == DType::f64);
  m.to_dtype(DType::f32);
  CHECK(copy_of(m.arena().values()) == values);
  const Tensor x = Tensor::full({4, 5}, 0.5);
  const std::vector<float> y = copy_of(m.forward(x, false));
  m.drop_grads();
  for (auto& p : m.params()) CHECK_FALSE(p.grad->defined());
  CHECK(copy_of(m.forward(x, false)) == y);
  m.forward(x, true);
  CHECK_THROWS_WITH(m.backward(Tensor::zeros({4, 2})), Catch::Matchers::Contains("forward-only"));
}

TEST_CASE("a model refuses modules added after its arena was built", "[nn][arena]") {
  Model m = small_model(4);
  CHECK_THROWS_AS(m.add("late", std::make_unique<Linear>(2, 2)), std::logic_error);
  // Nor through its containers: the root's, and a nested Sequential's.
  CHECK_THROWS_AS(m.root().add("late", std::make_unique<Linear>(2, 2)), std::logic_error);
  Model n;
  auto inner = std::make_unique<Sequential>();
  Sequential* inner_ptr = inner.get();
  inner->add("fc", std::make_unique<Linear>(5, 3));
  n.add("block", std::move(inner));
  n.finalize();
  CHECK_THROWS_WITH(inner_ptr->add("late", std::make_unique<Linear>(3, 3)),
                    Catch::Matchers::Contains("'late' after the model's parameter arena was built"));
  CHECK(n.root().size() == 1);
  CHECK(inner_ptr->size() == 1);
}
