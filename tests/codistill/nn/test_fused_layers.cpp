// The activations a Sequential fuses into the layer before them, besides Linear's
// (test_layers.cpp): BatchNorm -> ReLU (Op::batchnorm_activation) and Residual -> ReLU
// (Op::add_activation). Which pairs fuse, the fused pairs' gradients against finite
// differences (double, reference and fast; batch norm NCHW and channels-last, train and
// eval), and the fused pairs against the same layers run apart in float32 (forward,
// gradients, running statistics), synchronized batch norm included.
#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codistill/nn/layers/activation.hpp"
#include "codistill/nn/layers/batchnorm.hpp"
#include "codistill/nn/layers/linear.hpp"
#include "codistill/nn/blocks/residual.hpp"
#include "codistill/nn/blocks/sequential.hpp"
#include "codistill/util/rng.hpp"
#include "kernels/backend.hpp"
#include "support/gradcheck.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using codistill::kernels::Activation;
using codistill::kernels::DType;
using codistill::kernels::Shape;
using codistill::kernels::Tensor;
using codistill::kernels::cpu::Impl;
using codistill::test::check_gradients;
using codistill::test::fresh_seed;
using codistill::test::random_tensor;
using codistill::test::values;

namespace {

// Non-trivial affine parameters and running statistics (eval mode reads them); beta spread
// around 0 so that the relu cuts a good share of each channel.
void randomize(BatchNorm& bn, std::uint64_t seed) {
  const Shape c{bn.channels()};
  for (auto& p : bn.params()) *p.value = random_tensor(c, seed + (p.name == "weight" ? 1 : 2), p.name == "weight" ? 0.5 : -1, 1.5);
  for (auto& b : bn.buffers()) *b.value = random_tensor(c, seed + (b.name == "running_mean" ? 3 : 4), 0.5, 2);
}

// The smallest |BatchNorm output| (a ReLU's input) for the draws of `seed` (the gradient
// check's parameters and input).
double min_abs_batchnorm(const Shape& xs, bool channels_last, std::uint64_t seed, bool training) {
  BatchNorm probe(xs[1]);
  probe.to_dtype(DType::f64);
  randomize(probe, seed);
  probe.set_channels_last(channels_last);
  const std::vector<double> y = values(probe.forward(random_tensor(xs, seed + 5), training));
  double m = 1e300;
  for (double v : y) m = std::min(m, std::abs(v));
  return m;
}

BatchNorm& bn_of(Sequential& s, std::size_t i) { return dynamic_cast<BatchNorm&>(*s.children()[i].second); }
ActivationLayer& act_of(Sequential& s, std::size_t i) { return dynamic_cast<ActivationLayer&>(*s.children()[i].second); }

// The smallest |output| of a module (training mode) on x: how close a ReLU after it is to
// its kink.
double min_abs(Module& m, const kernels::Tensor& x) {
  double out = 1e300;
  for (double v : values(m.forward(x, true))) out = std::min(out, std::abs(v));
  return out;
}

Residual& res_of(Sequential& s, std::size_t i) { return dynamic_cast<Residual&>(*s.children()[i].second); }

// A residual block of width 6 on [B, 6] rows: Linear -> BatchNorm -> ReLU -> Linear in the
// body (its inner pair fused too), the identity or a Linear projection as the shortcut.
std::unique_ptr<Residual> block(Rng& rng, bool projection) {
  auto body = std::make_unique<Sequential>();
  auto fc1 = std::make_unique<Linear>(6, 6);
  fc1->init_params(rng, "kaiming_uniform");
  body->add("fc1", std::move(fc1));
  body->add("bn", std::make_unique<BatchNorm>(6));
  body->add("act", std::make_unique<ReLU>());
  auto fc2 = std::make_unique<Linear>(6, 6);
  fc2->init_params(rng, "kaiming_uniform");
  body->add("fc2", std::move(fc2));
  if (!projection) return std::make_unique<Residual>(std::move(body));
  auto proj = std::make_unique<Linear>(6, 6, /*bias=*/false);
  proj->init_params(rng, "kaiming_uniform");
  return std::make_unique<Residual>(std::move(body), std::move(proj));
}

// The block check_gradients builds from `seed` (the same draws).
std::unique_ptr<Residual> block_of_seed(std::uint64_t seed, bool projection) {
  Rng rng(seed);
  auto b = block(rng, projection);
  b->to_dtype(DType::f64);
  return b;
}

// One rank's group: the sums stay as they are (what a group of one gives).
struct OneRank final : GroupSum {
  void all_reduce_sum(std::span<double> /*values*/) override {}
};

}  // namespace

TEST_CASE("Sequential fuses BatchNorm -> ReLU where the backend has it, and nothing else", "[nn]") {
  REQUIRE(kernels::backend_for(kernels::Device::cpu()).supports(kernels::Op::batchnorm_activation, DType::f32));
  Sequential s;
  s.add("bn1", std::make_unique<BatchNorm>(3));
  s.add("relu1", std::make_unique<ReLU>());
  s.add("bn2", std::make_unique<BatchNorm>(3));
  s.add("gelu", std::make_unique<GELU>());  // only relu fuses
  s.add("bn3", std::make_unique<BatchNorm>(3));
  CHECK(bn_of(s, 0).fused_activation() == Activation::relu);
  CHECK(act_of(s, 1).passthrough());
  CHECK(bn_of(s, 2).fused_activation() == Activation::none);
  CHECK_FALSE(act_of(s, 3).passthrough());
  CHECK(bn_of(s, 4).fused_activation() == Activation::none);  // last: nothing after it yet
  s.add("relu3", std::make_unique<ReLU>());
  CHECK(bn_of(s, 4).fused_activation() == Activation::relu);  // re-decided on add
  CHECK(act_of(s, 5).passthrough());
  CHECK_THROWS_WITH(bn_of(s, 0).set_fused_activation(Activation::gelu), Catch::Contains("only relu"));

  Rng rng(1);
  Sequential r;
  r.add("block1", block(rng, false));
  r.add("relu1", std::make_unique<ReLU>());
  r.add("block2", block(rng, true));
  r.add("gelu", std::make_unique<GELU>());
  CHECK(res_of(r, 0).fused_activation() == Activation::relu);
  CHECK(act_of(r, 1).passthrough());
  CHECK(res_of(r, 2).fused_activation() == Activation::none);
  CHECK_FALSE(act_of(r, 3).passthrough());
  CHECK(bn_of(res_of(r, 0).body(), 1).fused_activation() == Activation::relu);  // the body's own pair
  CHECK_THROWS_WITH(res_of(r, 0).set_fused_activation(Activation::gelu), Catch::Contains("only relu"));
}

TEST_CASE("fused Residual+ReLU gradients match finite differences (identity and projection shortcuts)",
          "[nn][gradcheck]") {
  for (Impl impl : {Impl::reference, Impl::fast})
    for (bool projection : {false, true}) {
      // As below: a draw with a pre-activation at ReLU's kink is drawn again.
      auto seed = fresh_seed();
      while (min_abs(*block_of_seed(seed, projection), random_tensor({5, 6}, seed + 1)) < 1e-4) seed += 7919;
      INFO("seed " << seed << (projection ? ", projection" : ", identity"));
      Rng rng(seed);
      Sequential s;
      s.add("block", block(rng, projection));
      s.add("relu", std::make_unique<ReLU>());
      REQUIRE(res_of(s, 0).fused_activation() == Activation::relu);
      check_gradients(s, random_tensor({5, 6}, seed + 1), seed, impl);
    }
}

// A fused Residual -> ReLU against the same block and relu run apart (bit for bit: relu of the
// very sum, and the same mask before the same branches).
TEST_CASE("fused Residual+ReLU computes what Residual then ReLU computes", "[nn]") {
  for (bool projection : {false, true})
    for (Impl impl : {Impl::reference, Impl::fast}) {
      const auto seed = fresh_seed();
      INFO("seed " << seed << (projection ? ", projection" : ", identity"));
      Rng ra(seed), rb(seed);
      Sequential fused, block_alone, relu_alone;
      fused.add("block", block(ra, projection));
      fused.add("relu", std::make_unique<ReLU>());
      block_alone.add("block", block(rb, projection));
      relu_alone.add("relu", std::make_unique<ReLU>());
      REQUIRE(res_of(fused, 0).fused_activation() == Activation::relu);
      for (Sequential* s : {&fused, &block_alone, &relu_alone}) s->set_reference(impl == Impl::reference);
      const Tensor x = random_tensor({33, 6}, seed + 5, -2, 2).to(DType::f32);
      const Tensor dy = random_tensor({33, 6}, seed + 6).to(DType::f32);
      CHECK(values(fused.forward(x, true)) == values(relu_alone.forward(block_alone.forward(x, true), true)));
      const std::vector<double> dx = values(fused.backward(dy, true));
      CHECK(dx == values(block_alone.backward(relu_alone.backward(dy, true), true)));
      auto pa = collect_params(fused), pb = collect_params(block_alone);
      REQUIRE(pa.size() == pb.size());
      for (std::size_t i = 0; i < pa.size(); ++i) {
        INFO(pa[i].path);
        CHECK(values(*pa[i].grad) == values(*pb[i].grad));
      }
    }
}

TEST_CASE("fused BatchNorm+ReLU gradients match finite differences (NCHW and channels-last, train and eval)",
          "[nn][gradcheck]") {
  struct Case {
    Shape x;
    bool channels_last;
  };
  const Case cases[] = {{{6, 3}, false}, {{2, 4, 3, 5}, false}, {{3, 2, 7}, false}, {{2, 4, 3, 5}, true}};
  for (Impl impl : {Impl::reference, Impl::fast})
    for (const auto& c : cases)
      for (bool training : {true, false}) {
        // Central differences step 1e-6 over ReLU: a pre-activation that close to its kink
        // makes the numeric gradient wrong, not the layer; such draws are drawn again.
        auto seed = fresh_seed();
        while (min_abs_batchnorm(c.x, c.channels_last, seed, training) < 1e-4) seed += 7919;
        INFO("seed " << seed << (c.channels_last ? ", channels-last" : ""));
        Sequential s;
        auto bn = std::make_unique<BatchNorm>(c.x[1]);
        bn->to_dtype(DType::f64);
        randomize(*bn, seed);
        bn->set_channels_last(c.channels_last);
        s.add("bn", std::move(bn));
        s.add("relu", std::make_unique<ReLU>());
        REQUIRE(bn_of(s, 0).fused_activation() == Activation::relu);
        check_gradients(s, random_tensor(c.x, seed + 5), seed, impl, [] {}, training);
      }
}

// The fused pair and the same two layers run apart (a Sequential of one layer each: nothing
// to fuse), on the same float32 inputs: the fused op computes relu of the very value the
// unfused batch norm writes, and its backward masks dy exactly as relu's backward does before
// the same sums, so everything agrees bit for bit.
TEST_CASE("fused BatchNorm+ReLU computes what BatchNorm then ReLU computes", "[nn]") {
  const Shape shapes[] = {{8, 16, 5, 5}, {7, 5, 3, 3}, {40, 32}};
  for (const Shape& xs : shapes)
    for (bool channels_last : {false, true})
      for (bool synced : {false, true})
        for (Impl impl : {Impl::reference, Impl::fast}) {
          if (channels_last && xs.size() != 4) continue;
          const auto seed = fresh_seed();
          INFO("seed " << seed << ", input " << kernels::shape_str(xs) << (channels_last ? " channels-last" : "")
                       << (synced ? " synchronized" : "") << (impl == Impl::fast ? " fast" : " reference"));
          Sequential fused, bn_alone, relu_alone;
          for (Sequential* s : {&fused, &bn_alone}) {
            auto bn = std::make_unique<BatchNorm>(xs[1]);
            bn->to_dtype(DType::f64);
            randomize(*bn, seed);
            bn->to_dtype(DType::f32);
            bn->set_channels_last(channels_last);
            if (synced) bn->set_group_sum(std::make_shared<OneRank>());
            s->add("bn", std::move(bn));
          }
          fused.add("relu", std::make_unique<ReLU>());
          relu_alone.add("relu", std::make_unique<ReLU>());
          REQUIRE(bn_of(fused, 0).fused_activation() == Activation::relu);
          for (Sequential* s : {&fused, &bn_alone, &relu_alone}) s->set_reference(impl == Impl::reference);
          const Tensor x = random_tensor(xs, seed + 5, -2, 2).to(DType::f32);
          const Tensor dy = random_tensor(xs, seed + 6).to(DType::f32);
          for (bool training : {true, false}) {
            INFO((training ? "train" : "eval"));
            const std::vector<double> y = values(fused.forward(x, training));
            CHECK(y == values(relu_alone.forward(bn_alone.forward(x, training), training)));
            for (std::size_t i = 0; i < 2; ++i)
              CHECK(values(*bn_of(fused, 0).buffers()[i].value) == values(*bn_of(bn_alone, 0).buffers()[i].value));
            for (Sequential* s : {&fused, &bn_alone})
              for (auto& p : collect_params(*s)) p.grad->zero();
            const std::vector<double> dx = values(fused.backward(dy, true));
            CHECK(dx == values(bn_alone.backward(relu_alone.backward(dy, true), true)));
            for (std::size_t i = 0; i < 2; ++i)
              CHECK(values(*bn_of(fused, 0).params()[i].grad) == values(*bn_of(bn_alone, 0).params()[i].grad));
          }
        }
}
