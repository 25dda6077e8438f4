// Model::zero_grad_lazily: a model of Linears writes its gradients in the first backward
// instead of adding to zeros, bit for bit what zero_grad + backward gives, over gradient
// blocks full of NaN; later backwards (micro-batches) add; models with layers that add
// (convolutions) fall back to zeroing; the fused head's backward refuses stale gradients.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "codistill/config/config.hpp"
#include "codistill/models/model.hpp"
#include "codistill/util/rng.hpp"
#include "model_test_util.hpp"

using namespace codistill;
using codistill::kernels::DType;
using codistill::kernels::Tensor;

namespace {

ModelConfig config(const char* kind) {
  ModelConfig cfg;
  cfg.kind = kind;
  cfg.hidden = {64, 32};
  cfg.channels = {4, 8};
  cfg.input_shape = {1, 28, 28};
  cfg.classes = 10;
  return cfg;
}

Model build(const ModelConfig& cfg) {
  Rng rng(7);
  return build_model(cfg, rng);
}

// Every parameter's gradient (what a last step may leave; the arena's padding between them
// is zero from the start and nothing writes it).
void poison(Model& m) {
  for (auto& p : m.params()) {
    float* g = p.grad->data<float>();
    for (std::int64_t i = 0; i < p.grad->numel(); ++i) g[i] = std::numeric_limits<float>::quiet_NaN();
  }
}

std::vector<float> grads(Model& m) {
  const Tensor& g = m.arena().grads();
  return {g.data<float>(), g.data<float>() + g.numel()};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One backward from a fixed upstream gradient after a forward of x.
void forward_backward(Model& m, const Tensor& x, const Tensor& dlogits) {
  m.forward(x, /*training=*/true);
  m.backward(dlogits);
}

}  // namespace

TEST_CASE("zero_grad_lazily: an MLP writes its gradients over NaN, the bits of zero_grad, then adds",
          "[models][grads]") {
  Model eager = build(config("mlp")), lazy = build(config("mlp"));
  const Tensor x = model_test::random_input({16, 1, 28, 28}, 1);
  const Tensor d1 = model_test::random_input({16, 10}, 2), d2 = model_test::random_input({16, 10}, 3);
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    poison(lazy);  // whatever the last step left: never read
    eager.zero_grad();
    lazy.zero_grad_lazily();
    forward_backward(eager, x, d1);
    forward_backward(lazy, x, d1);
    const auto first = grads(lazy);
    for (float v : first) REQUIRE(std::isfinite(v));
    CHECK(same_bits(first, grads(eager)));
    // A second micro-batch adds to the first's gradients.
    forward_backward(eager, x, d2);
    forward_backward(lazy, x, d2);
    CHECK(same_bits(grads(lazy), grads(eager)));
    CHECK_FALSE(same_bits(grads(lazy), first));
  }
  // zero_grad after zero_grad_lazily zeroes and clears the marks: the next backward adds.
  lazy.zero_grad_lazily();
  lazy.zero_grad();
  eager.zero_grad();
  forward_backward(lazy, x, d2);
  forward_backward(eager, x, d2);
  CHECK(same_bits(grads(lazy), grads(eager)));
}

TEST_CASE("zero_grad_lazily zeroes where a layer adds (a CNN's convolutions)", "[models][grads]") {
  Model eager = build(config("cnn")), lazy = build(config("cnn"));
  const Tensor x = model_test::random_input({4, 1, 28, 28}, 4);
  const Tensor d = model_test::random_input({4, 10}, 5);
  poison(lazy);
  eager.zero_grad();
  lazy.zero_grad_lazily();
  for (float v : grads(lazy)) REQUIRE(v == 0.0f);  // zeroed now, as zero_grad
  forward_backward(eager, x, d);
  forward_backward(lazy, x, d);
  CHECK(same_bits(grads(lazy), grads(eager)));
}

TEST_CASE("the fused head's backward refuses gradients left stale by zero_grad_lazily", "[models][grads]") {
  Model m = build(config("mlp"));
  const Tensor x = model_test::random_input({4, 1, 28, 28}, 6);
  m.zero_grad_lazily();
  const Tensor features = m.forward_features(x, /*training=*/true);
  const Tensor df = model_test::random_input(features.shape(), 7);
  CHECK_THROWS_AS(m.backward_features(df), std::logic_error);
  m.zero_grad();  // clears the marks
  CHECK_NOTHROW(m.backward_features(df));
}

TEST_CASE("zero_grad_lazily under a gradients-ready hook: the same reports and the same bits", "[models][grads]") {
  Model eager = build(config("mlp")), lazy = build(config("mlp"));
  const Tensor x = model_test::random_input({8, 1, 28, 28}, 8);
  const Tensor d = model_test::random_input({8, 10}, 9);
  std::vector<std::int64_t> seen_eager, seen_lazy;
  eager.set_gradients_ready([&](std::int64_t first) { seen_eager.push_back(first); });
  lazy.set_gradients_ready([&](std::int64_t first) { seen_lazy.push_back(first); });
  poison(lazy);
  eager.zero_grad();
  lazy.zero_grad_lazily();
  forward_backward(eager, x, d);
  forward_backward(lazy, x, d);
  CHECK(same_bits(grads(lazy), grads(eager)));
  CHECK_FALSE(seen_lazy.empty());
  CHECK(seen_lazy == seen_eager);
}

TEST_CASE("a backward that throws after zero_grad_lazily leaves zeroed gradients", "[models][grads]") {
  Model eager = build(config("mlp")), lazy = build(config("mlp"));
  const Tensor x = model_test::random_input({4, 1, 28, 28}, 10);
  const Tensor d = model_test::random_input({4, 10}, 11), bad = model_test::random_input({4, 9}, 12);
  poison(lazy);
  lazy.zero_grad_lazily();
  lazy.forward(x, /*training=*/true);
  CHECK_THROWS_AS(lazy.backward(bad), std::invalid_argument);
  for (float v : grads(lazy)) REQUIRE(v == 0.0f);
  // Going on adds onto those zeros: the gradients of zero_grad + backward.
  lazy.backward(d);
  eager.zero_grad();
  forward_backward(eager, x, d);
  CHECK(same_bits(grads(lazy), grads(eager)));
}
