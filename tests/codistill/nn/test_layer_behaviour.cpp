// Layer behaviour besides gradients: shapes and their errors, initializers, dropout's
// statistics and rng state, dtype checks and buffer reuse.
#include <cmath>
#include <cstring>

#include "codistill/nn/layers/batchnorm.hpp"
#include "codistill/nn/layers/conv2d.hpp"
#include "codistill/nn/layers/dropout.hpp"
#include "codistill/nn/layers/flatten.hpp"
#include "codistill/nn/layers/linear.hpp"
#include "codistill/nn/layers/maxpool2d.hpp"
#include "codistill/nn/layers/activation.hpp"
#include "codistill/util/rng.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using codistill::kernels::DType;
using codistill::kernels::Shape;
using codistill::kernels::Tensor;
using Catch::Matchers::Contains;

namespace {

Tensor random_f32(const Shape& shape, std::uint64_t seed) {
  auto v = test::random_vector<float>(static_cast<std::size_t>(kernels::shape_numel(shape)), seed);
  return Tensor::from_vector(shape, v);
}

struct Stats {
  double min = 1e300, max = -1e300, mean = 0, std = 0;
};

Stats stats(const Tensor& t) {
  Stats s;
  const float* p = t.data<float>();
  double sum = 0, sq = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    s.min = std::min(s.min, double(p[i]));
    s.max = std::max(s.max, double(p[i]));
    sum += p[i];
    sq += double(p[i]) * p[i];
  }
  const double n = static_cast<double>(t.numel());
  s.mean = sum / n;
  s.std = std::sqrt(sq / n - s.mean * s.mean);
  return s;
}

}  // namespace

TEST_CASE("output shapes and impossible shapes", "[nn]") {
  CHECK(Conv2d(1, 32, 5).output_shape({1, 28, 28}) == Shape{32, 28, 28});
  CHECK(Conv2d(3, 8, 3, 2, 0).output_shape({3, 7, 6}) == Shape{8, 3, 2});
  CHECK(Conv2d(3, 8, 4).padding() == 2);
  CHECK_THROWS_WITH(Conv2d(1, 4, 5, 1, 0).output_shape({1, 3, 3}), Contains("does not fit"));
  CHECK_THROWS_WITH(Conv2d(2, 4, 3).output_shape({1, 8, 8}), Contains("expected input [2, H, W]"));
  CHECK_THROWS_AS(Conv2d(0, 4, 3), std::invalid_argument);
  CHECK(MaxPool2d(2).output_shape({64, 14, 14}) == Shape{64, 7, 7});
  CHECK(MaxPool2d(2).output_shape({64, 7, 7}) == Shape{64, 3, 3});
  CHECK(MaxPool2d(3, 1).output_shape({1, 5, 4}) == Shape{1, 3, 2});
  CHECK_THROWS_WITH(MaxPool2d(2).output_shape({64, 1, 1}), Contains("below 1x1"));
  CHECK(Flatten().output_shape({64, 7, 7}) == Shape{3136});
  CHECK(Linear(3136, 128).output_shape({3136}) == Shape{128});
  CHECK_THROWS_AS(Linear(10, 0), std::invalid_argument);
  CHECK_THROWS_AS(Linear(10, 5).output_shape({11}), std::invalid_argument);
  CHECK_THROWS_AS(Dropout(1.0), std::invalid_argument);
  CHECK_THROWS_AS(Dropout(-0.1), std::invalid_argument);

  Linear fc(4, 3);
  CHECK_THROWS_WITH(fc.forward(Tensor::zeros({2, 5}), true), Contains("expected input [B, 4]"));
  CHECK_THROWS_WITH(fc.forward(Tensor::zeros({2, 4}, DType::f64), true), Contains("float64"));
  CHECK_THROWS_AS(fc.backward(Tensor::zeros({2, 3})), std::logic_error);
}

TEST_CASE("initializers follow their distributions", "[nn][init]") {
  const auto seed = test::fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  Linear fc(400, 500);  // fan_in 400, fan_out 500, 200k weights

  // Parameters are float: a bound computed in double rounds to a float up to half an ulp
  // above it, which a draw of exactly +-1 times the bound can reach.
  const double f32 = 1 + 1e-7;
  fc.init_params(rng, "kaiming_uniform");  // U(-1/20, 1/20) for weight and bias
  Stats w = stats(*fc.params()[0].value), b = stats(*fc.params()[1].value);
  CHECK(w.max <= 0.05 * f32);
  CHECK(w.min >= -0.05 * f32);
  CHECK(w.max > 0.0499);
  CHECK(w.std == Approx(0.05 / std::sqrt(3.0)).epsilon(0.02));
  CHECK(b.max <= 0.05 * f32);
  CHECK(b.min >= -0.05 * f32);
  CHECK(b.std > 0.02);

  fc.init_params(rng, "kaiming_normal");  // N(0, 2/400), bias 0
  w = stats(*fc.params()[0].value);
  b = stats(*fc.params()[1].value);
  CHECK(w.std == Approx(std::sqrt(2.0 / 400)).epsilon(0.02));
  CHECK(std::abs(w.mean) < 0.002);
  CHECK(b.min == 0.0);
  CHECK(b.max == 0.0);

  fc.init_params(rng, "xavier_uniform");  // U(-b, b), b = sqrt(6/900)
  w = stats(*fc.params()[0].value);
  const double bound = std::sqrt(6.0 / 900.0);
  CHECK(w.max <= bound * f32);
  CHECK(w.min >= -bound * f32);
  CHECK(w.std == Approx(bound / std::sqrt(3.0)).epsilon(0.02));

  Conv2d conv(4, 8, 3);  // fan_in 36
  conv.init_params(rng, "kaiming_uniform");
  CHECK(stats(*conv.params()[0].value).max <= f32 / 6.0);
  CHECK_THROWS_WITH(fc.init_params(rng, "orthogonal"),
                    "unknown init 'orthogonal' (valid: kaiming_normal, kaiming_uniform, xavier_uniform)");
}

TEST_CASE("dropout: identity when not training, mask statistics, rng state", "[nn][dropout]") {
  const auto seed = test::fresh_seed();
  INFO("seed " << seed);
  Rng init(seed);
  Dropout drop(0.25);
  drop.init_params(init, "");
  Tensor x = Tensor::full({100, 1000}, 1.0);

  Tensor eval = drop.forward(x, false);
  CHECK(eval.raw() == x.raw());  // identity: the very same buffer
  CHECK(drop.backward(x).raw() == x.raw());
  Dropout none(0.0);
  CHECK(none.forward(x, true).raw() == x.raw());

  const Rng::State state = drop.rng()->state();
  const Tensor y = drop.forward(x, true).clone();
  std::int64_t kept = 0, other = 0;
  for (std::int64_t i = 0; i < y.numel(); ++i) {
    const float v = y.data<float>()[i];
    if (v == 0.0f) continue;
    ++kept;
    other += v == static_cast<float>(1.0 / 0.75) ? 0 : 1;
  }
  CHECK(other == 0);  // every element is 0 or 1/(1-p)
  // 100k Bernoulli(0.75) draws: std of the fraction is 0.0014, so 0.01 is over 7 sigma.
  CHECK(static_cast<double>(kept) / static_cast<double>(y.numel()) == Approx(0.75).margin(0.01));

  // The next mask differs; restoring the state reproduces the first one bit for bit.
  Tensor second = drop.forward(x, true);
  CHECK(std::memcmp(second.raw(), y.raw(), y.nbytes()) != 0);
  drop.rng()->set_state(state);
  Tensor again = drop.forward(x, true);
  CHECK(std::memcmp(again.raw(), y.raw(), y.nbytes()) == 0);
}

TEST_CASE("layers reuse their buffers while the shape is unchanged", "[nn]") {
  Rng rng(3);
  Linear fc(8, 4);
  fc.init_params(rng, "kaiming_uniform");
  ReLU relu;
  Tensor x = random_f32({5, 8}, 11);
  const void* y1 = fc.forward(x, true).raw();
  const void* r1 = relu.forward(fc.forward(x, true), true).raw();
  const void* dx1 = fc.backward(Tensor::full({5, 4}, 1.0)).raw();
  CHECK(fc.forward(x, true).raw() == y1);
  CHECK(relu.forward(fc.forward(x, true), true).raw() == r1);
  CHECK(fc.backward(Tensor::full({5, 4}, 1.0)).raw() == dx1);
  // A new batch size reallocates and still gives the right shape.
  CHECK(fc.forward(random_f32({7, 8}, 12), true).shape() == Shape{7, 4});
}

TEST_CASE("to_dtype converts parameters and keeps their values", "[nn]") {
  Rng rng(5);
  Conv2d conv(2, 3, 3);
  conv.init_params(rng, "kaiming_uniform");
  const Tensor w32 = conv.params()[0].value->clone();
  conv.to_dtype(DType::f64);
  for (auto& p : conv.params()) {
    CHECK(p.value->dtype() == DType::f64);
    CHECK(p.grad->dtype() == DType::f64);
  }
  const Tensor w64 = conv.params()[0].value->to(DType::f32);
  CHECK(std::memcmp(w64.raw(), w32.raw(), w32.nbytes()) == 0);
  CHECK(conv.forward(Tensor::zeros({1, 2, 4, 4}, DType::f64), false).dtype() == DType::f64);
}

TEST_CASE("BatchNorm: batch statistics in training, running ones in evaluation (PyTorch's momentum)", "[nn]") {
  BatchNorm bn(2);  // weight 1, bias 0, running mean 0, running var 1, momentum 0.1
  // [N=2, C=2, L=2]: channel 0 holds 1, 1, 3, 3 (mean 2, biased var 1, unbiased 4/3),
  // channel 1 holds 4, 4, 4, 4.
  Tensor x = Tensor::from_vector({2, 2, 2}, std::vector<float>{1, 1, 4, 4, 3, 3, 4, 4});
  Tensor y = bn.forward(x, true);
  const float* p = y.data<float>();
  const double s0 = 1 / std::sqrt(1 + 1e-5);
  CHECK(p[0] == Approx(-s0).epsilon(1e-6));
  CHECK(p[4] == Approx(s0).epsilon(1e-6));
  CHECK(p[2] == 0.0f);  // a constant channel normalizes to 0
  auto buffers = bn.buffers();
  REQUIRE(buffers.size() == 2);
  CHECK(buffers[0].name == "running_mean");
  CHECK(buffers[0].value->data<float>()[0] == Approx(0.2).epsilon(1e-6));
  CHECK(buffers[0].value->data<float>()[1] == Approx(0.4).epsilon(1e-6));
  CHECK(buffers[1].value->data<float>()[0] == Approx(0.9 + 0.1 * 4.0 / 3.0).epsilon(1e-6));
  CHECK(buffers[1].value->data<float>()[1] == Approx(0.9).epsilon(1e-6));
  // Evaluation reads the running statistics and leaves them alone.
  Tensor e = bn.forward(x, false);
  CHECK(e.data<float>()[0] == Approx((1 - 0.2) / std::sqrt(0.9 + 0.4 / 3.0 + 1e-5)).epsilon(1e-6));
  CHECK(buffers[0].value->data<float>()[0] == Approx(0.2).epsilon(1e-6));
  // Shapes: [C], [C, L], [C, H, W]; a wrong channel count is named.
  CHECK(bn.output_shape({2, 5, 5}) == Shape{2, 5, 5});
  CHECK_THROWS_WITH(bn.output_shape({3, 4}), Contains("batchnorm: expected input [2]"));
  CHECK_THROWS_WITH(bn.forward(Tensor::zeros({1, 2}), true), Contains("more than one value per channel"));
  CHECK_NOTHROW(bn.forward(Tensor::zeros({1, 2}), false));
  CHECK_THROWS_WITH(BatchNorm(4, 0.0), Contains("eps must be > 0"));
}
