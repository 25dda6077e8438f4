// A Sequential runs a ReLU that a MaxPool2d follows after the pool (codistill/nn/
// sequential.hpp): which pairs it reorders, and that the reordered pair gives bit for bit
// what relu then pool gives — outputs, input gradients and a convolution's parameter
// gradients before it — on maps with the cases where the order could show: windows of
// negatives only, zeros and negative zeros, equal positive maxima, overlapping windows,
// odd sizes, both CPU paths.
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "codistill/nn/layers/activation.hpp"
#include "codistill/nn/layers/batchnorm.hpp"
#include "codistill/nn/layers/conv2d.hpp"
#include "codistill/nn/layers/maxpool2d.hpp"
#include "codistill/nn/blocks/sequential.hpp"
#include "codistill/util/rng.hpp"
#include "kernels/cpu/impl.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using codistill::kernels::Shape;
using codistill::kernels::Tensor;
using codistill::kernels::cpu::Impl;
using codistill::test::fresh_seed;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.data<float>(), b.data<float>(), static_cast<std::size_t>(a.numel()) * sizeof(float)) == 0;
}

// Values in [-2, 2] with planted trouble: a quarter of the 2x2 blocks all negative, some
// entries exactly 0 or -0, and runs of equal positive values (ties for the maximum).
Tensor tricky(const Shape& shape, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(static_cast<std::size_t>(shape[0] * shape[1] * shape[2] * shape[3]));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto kind = g() % 16;
    if (kind == 0) v[i] = 0.0f;
    else if (kind == 1) v[i] = -0.0f;
    else if (kind <= 3 && i > 0) v[i] = v[i - 1];  // a tie with the neighbour
    else if (kind <= 7) v[i] = -std::abs(u(g));
    else v[i] = u(g);
  }
  return Tensor::from_vector(shape, v);
}

}  // namespace

TEST_CASE("Sequential runs a ReLU after the max pool that follows it, and no other activation", "[nn]") {
  Sequential s;
  s.add("relu1", std::make_unique<ReLU>());
  s.add("pool1", std::make_unique<MaxPool2d>(2));
  s.add("gelu", std::make_unique<GELU>());  // gelu does not commute with max
  s.add("pool2", std::make_unique<MaxPool2d>(2));
  s.add("relu2", std::make_unique<ReLU>());  // last: nothing after it yet
  CHECK(s.runs_after_next(0));
  CHECK_FALSE(s.runs_after_next(1));
  CHECK_FALSE(s.runs_after_next(2));
  CHECK_FALSE(s.runs_after_next(4));
  s.add("pool3", std::make_unique<MaxPool2d>(2));
  CHECK(s.runs_after_next(4));  // re-decided on add
  CHECK_FALSE(s.runs_after_next(99));

  // A ReLU that batch norm applies (fused, passthrough) stays where it is.
  Sequential b;
  b.add("bn", std::make_unique<BatchNorm>(3));
  b.add("relu", std::make_unique<ReLU>());
  b.add("pool", std::make_unique<MaxPool2d>(2));
  REQUIRE(dynamic_cast<ActivationLayer&>(*b.children()[1].second).passthrough());
  CHECK_FALSE(b.runs_after_next(1));
}

TEST_CASE("conv, relu, max pool reordered gives bit for bit what relu then pool gives", "[nn]") {
  struct Case {
    std::int64_t k, stride, hw;
  };
  for (const Case c : {Case{2, 2, 8}, Case{2, 2, 7}, Case{3, 2, 9}, Case{3, 1, 6}})
    for (Impl impl : {Impl::reference, Impl::fast}) {
      const auto seed = fresh_seed();
      INFO("seed " << seed << ", pool " << c.k << "/" << c.stride << " on " << c.hw << "x" << c.hw
                   << (impl == Impl::fast ? ", fast" : ", reference"));
      Rng ra(seed), rb(seed);
      auto conv = [&](Rng& rng) {
        auto m = std::make_unique<Conv2d>(2, 3, 3);
        m->init_params(rng, "kaiming_uniform");
        return m;
      };
      // The reordered container, and the same layers run apart in the written order.
      Sequential reordered, conv_alone, relu_alone, pool_alone;
      reordered.add("conv", conv(ra));
      reordered.add("relu", std::make_unique<ReLU>());
      reordered.add("pool", std::make_unique<MaxPool2d>(c.k, c.stride));
      conv_alone.add("conv", conv(rb));
      relu_alone.add("relu", std::make_unique<ReLU>());
      pool_alone.add("pool", std::make_unique<MaxPool2d>(c.k, c.stride));
      REQUIRE(reordered.runs_after_next(1));
      for (Sequential* s : {&reordered, &conv_alone, &relu_alone, &pool_alone})
        s->set_reference(impl == Impl::reference);

      const Tensor x = tricky({3, 2, c.hw, c.hw}, seed + 1);
      const Tensor y = reordered.forward(x, true);
      // The relu sees the convolution's output in the written order: plant the trouble there.
      const Tensor h = conv_alone.forward(x, true);
      const Tensor want = pool_alone.forward(relu_alone.forward(h, true), true);
      CHECK(same_bits(y, want));
      // The same check on a map that is itself tricky (the convolution's output rarely ties).
      Sequential pair, relu2, pool2;
      pair.add("relu", std::make_unique<ReLU>());
      pair.add("pool", std::make_unique<MaxPool2d>(c.k, c.stride));
      relu2.add("relu", std::make_unique<ReLU>());
      pool2.add("pool", std::make_unique<MaxPool2d>(c.k, c.stride));
      for (Sequential* s : {&pair, &relu2, &pool2}) s->set_reference(impl == Impl::reference);
      const Tensor t = tricky({4, 3, c.hw, c.hw}, seed + 2);
      CHECK(same_bits(pair.forward(t, true), pool2.forward(relu2.forward(t, true), true)));
      const Shape po = pool2.output_shape({3, c.hw, c.hw});
      const Tensor dt = tricky({4, po[0], po[1], po[2]}, seed + 3);
      CHECK(same_bits(pair.backward(dt, true), relu2.backward(pool2.backward(dt, true), true)));

      // Backward through the convolution: its input gradient and its parameters' gradients.
      const Tensor dy = tricky(y.shape(), seed + 4);
      std::vector<std::size_t> reported;
      reordered.set_after_child_backward([&](std::size_t i) { reported.push_back(i); });
      for (Sequential* s : {&reordered, &conv_alone})
        for (const auto& p : collect_params(*s)) std::memset(p.grad->data<float>(), 0, p.grad->numel() * sizeof(float));
      const Tensor dx = reordered.backward(dy, true);
      CHECK(reported == std::vector<std::size_t>{2, 1, 0});  // every child, last to first
      const Tensor want_dx = conv_alone.backward(relu_alone.backward(pool_alone.backward(dy, true), true), true);
      CHECK(same_bits(dx, want_dx));
      const auto pa = collect_params(reordered), pb = collect_params(conv_alone);
      REQUIRE(pa.size() == pb.size());
      for (std::size_t i = 0; i < pa.size(); ++i) {
        INFO(pa[i].path);
        CHECK(same_bits(*pa[i].grad, *pb[i].grad));
      }
    }
}

// A prefix that ends between the relu and the pool runs the relu where it is written.
TEST_CASE("a Sequential prefix that ends between a ReLU and its max pool keeps the written order", "[nn]") {
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  Rng ra(seed), rb(seed);
  Sequential s, conv_alone, relu_alone;
  auto conv = [](Rng& rng) {
    auto m = std::make_unique<Conv2d>(2, 3, 3);
    m->init_params(rng, "kaiming_uniform");
    return m;
  };
  s.add("conv", conv(ra));
  s.add("relu", std::make_unique<ReLU>());
  s.add("pool", std::make_unique<MaxPool2d>(2));
  conv_alone.add("conv", conv(rb));
  relu_alone.add("relu", std::make_unique<ReLU>());
  REQUIRE(s.runs_after_next(1));
  const Tensor x = tricky({2, 2, 6, 6}, seed + 1);
  const Tensor h = s.forward_prefix(x, true, 2);
  CHECK(h.shape() == Shape{2, 3, 6, 6});
  CHECK(same_bits(h, relu_alone.forward(conv_alone.forward(x, true), true)));
  const Tensor dh = tricky(h.shape(), seed + 2);
  CHECK(same_bits(s.backward_prefix(dh, 2, true), conv_alone.backward(relu_alone.backward(dh, true), true)));
}
