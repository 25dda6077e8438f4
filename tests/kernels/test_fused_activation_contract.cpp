// The fused pairs' contract (kernels/backend.hpp): Op::add_activation and
// Op::batchnorm_activation take relu only; any other activation throws
// std::invalid_argument naming the op, before anything is written. On the CPU, and on CUDA
// where a GPU is present (the op driver, test_backend_ops, checks their values).
#include <catch2/catch.hpp>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/tensor.hpp"
#include "support/cuda_test.hpp"

namespace {

using namespace codistill;
namespace k = codistill::kernels;
using k::Activation;
using k::DType;
using k::Tensor;

std::vector<float> host(const Tensor& t, k::Queue& q) {
  q.synchronize();
  const Tensor h = t.to(k::Device::cpu());
  return {h.data<float>(), h.data<float>() + h.numel()};
}

void check_rejects_non_relu(k::Backend& b, k::Device dev) {
  REQUIRE(b.supports(k::Op::add_activation, DType::f32));
  REQUIRE(b.supports(k::Op::batchnorm_activation, DType::f32));
  auto q = b.make_queue(dev);
  k::BatchNormShape s;
  s.batch = 4, s.channels = 3, s.spatial = 5;
  const std::int64_t n = s.batch * s.channels * s.spatial;
  auto z = [&](std::int64_t len) { return Tensor::zeros({len}, DType::f32, dev); };
  Tensor a = z(n), x = z(n), y = z(n), dy = z(n), dx = z(n), gamma = z(3), beta = z(3), rm = z(3), rv = z(3), sm = z(3),
         si = z(3), dg = z(3), db = z(3);
  for (Activation act : {Activation::none, Activation::gelu}) {
    INFO(b.name() << " act " << k::activation_name(act));
    const auto relu_only = Catch::Matchers::Contains("must be relu");
    CHECK_THROWS_AS(b.add_activation(a, a, y, act, *q), std::invalid_argument);
    CHECK_THROWS_WITH(b.add_activation(a, a, y, act, *q), Catch::Matchers::Contains("add+activation") && relu_only);
    CHECK_THROWS_AS(b.batchnorm_activation_forward(x, gamma, beta, rm, rv, y, sm, si, true, act, s, *q),
                    std::invalid_argument);
    CHECK_THROWS_WITH(b.batchnorm_activation_forward(x, gamma, beta, rm, rv, y, sm, si, true, act, s, *q),
                      Catch::Matchers::Contains("batchnorm+activation") && relu_only);
    CHECK_THROWS_AS(b.batchnorm_activation_backward(x, y, gamma, sm, si, dy, &dx, dg, db, true, act, s, *q),
                    std::invalid_argument);
    CHECK_THROWS_WITH(b.batchnorm_activation_backward(x, y, gamma, sm, si, dy, &dx, dg, db, true, act, s, *q),
                      Catch::Matchers::Contains("batchnorm+activation") && relu_only);
  }
  // Nothing written: y (sums' and batch norm's output), the statistics and gradients.
  for (const Tensor* t : {&y, &rm, &rv, &sm, &si, &dx, &dg, &db})
    for (float v : host(*t, *q)) REQUIRE(v == 0.0f);
  // And relu itself is taken (what the rejection is measured against).
  CHECK_NOTHROW(b.add_activation(a, a, y, Activation::relu, *q));
  q->synchronize();
}

}  // namespace

TEST_CASE("fused pairs on the CPU take relu only, naming the op otherwise", "[ops]") {
  check_rejects_non_relu(k::backend_for(k::Device::cpu()), k::Device::cpu());
}

TEST_CASE("fused pairs on CUDA take relu only, naming the op otherwise", "[cuda][ops]") {
  if (test::skip_without_cuda()) return;
  check_rejects_non_relu(test::cuda(), k::Device::cuda(0));
}
