// The CUDA twins of two CPU-tested step shortcuts (test_lazy_zero.cpp,
// nn/test_relu_pool_order.cpp), run on a device's own kernels:
// - Model::zero_grad_lazily on CUDA: an MLP's Linears write their gradients (cuBLAS beta 0)
//   over a gradient block full of NaN, bit for bit what zero_grad + backward gives there,
//   and a second micro-batch adds;
// - a ReLU that a MaxPool2d follows runs after the pool on CUDA too, and gives bit for bit
//   what relu then pool gives there: outputs and input gradients, on maps with windows of
//   negatives only, zeros and negative zeros, and tied maxima (the CUDA relu gives +0 for
//   -0 and the CUDA pool picks the first maximum, as the CPU's do).
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "codistill/models/model.hpp"
#include "codistill/nn/layers/activation.hpp"
#include "codistill/nn/layers/maxpool2d.hpp"
#include "codistill/util/rng.hpp"
#include "support/cuda_test.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using codistill::kernels::Device;
using codistill::kernels::Shape;
using codistill::kernels::Tensor;
using codistill::test::fresh_seed;
using codistill::test::host_values;
using codistill::test::on_device;
using codistill::test::skip_without_cuda;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

Tensor random_f32(const Shape& shape, std::uint64_t seed) {
  return Tensor::from_vector(
      shape, test::random_vector<float>(static_cast<std::size_t>(kernels::shape_numel(shape)), seed, -2, 2));
}

// Values in [-2, 2] with planted trouble (as the CPU test's): all-negative windows, 0 and
// -0, runs of equal values (ties for the maximum).
Tensor tricky(const Shape& shape, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(static_cast<std::size_t>(kernels::shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto kind = g() % 16;
    if (kind == 0) v[i] = 0.0f;
    else if (kind == 1) v[i] = -0.0f;
    else if (kind <= 3 && i > 0) v[i] = v[i - 1];
    else if (kind <= 7) v[i] = -std::abs(u(g));
    else v[i] = u(g);
  }
  return Tensor::from_vector(shape, v);
}

Model mlp_on_cuda(std::uint64_t seed) {
  ModelConfig cfg;
  cfg.kind = "mlp";
  cfg.hidden = {64, 32};
  cfg.input_shape = {1, 28, 28};
  cfg.classes = 10;
  Rng rng(seed);
  Model m = build_model(cfg, rng);
  m.to_device(Device::cuda(0));
  return m;
}

// Every parameter's gradient on the model's device, NaN (what a last step may leave; the
// arena's padding between them is zero from the start and nothing writes it).
void poison_grads(Model& m) {
  for (auto& p : m.params()) {
    const std::vector<float> nan(static_cast<std::size_t>(p.grad->numel()), std::numeric_limits<float>::quiet_NaN());
    m.queue().copy(*p.grad, Tensor::from_vector(p.grad->shape(), nan));
  }
  m.synchronize();
}

std::vector<float> grads(Model& m) { return host_values(m.arena().grads(), m.queue()); }

// A model whose only module is `layer`, on CUDA.
Model on_cuda(ModulePtr layer) {
  Model m;
  m.add("layer", std::move(layer));
  m.finalize();
  m.to_device(Device::cuda(0));
  return m;
}

}  // namespace

TEST_CASE("zero_grad_lazily on CUDA: an MLP writes its gradients over NaN, the bits of zero_grad, then adds",
          "[cuda][models][grads]") {
  if (skip_without_cuda()) return;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  Model eager = mlp_on_cuda(seed), lazy = mlp_on_cuda(seed);
  kernels::Queue& qe = eager.queue();
  kernels::Queue& ql = lazy.queue();
  const Tensor x = random_f32({16, 1, 28, 28}, seed + 1);
  const Tensor d1 = random_f32({16, 10}, seed + 2), d2 = random_f32({16, 10}, seed + 3);
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    poison_grads(lazy);
    eager.zero_grad();
    lazy.zero_grad_lazily();
    REQUIRE(std::isnan(host_values(*lazy.params()[0].grad, ql)[0]));  // not zeroed: the lazy path
    eager.forward(on_device(x, qe), true);
    lazy.forward(on_device(x, ql), true);
    eager.backward(on_device(d1, qe));
    lazy.backward(on_device(d1, ql));
    const auto first = grads(lazy);
    for (float v : first) REQUIRE(std::isfinite(v));
    CHECK(same_bits(first, grads(eager)));
    // A second micro-batch adds to the first's gradients.
    eager.forward(on_device(x, qe), true);
    lazy.forward(on_device(x, ql), true);
    eager.backward(on_device(d2, qe));
    lazy.backward(on_device(d2, ql));
    const auto second = grads(lazy);
    CHECK(same_bits(second, grads(eager)));
    CHECK_FALSE(same_bits(second, first));
  }
}

TEST_CASE("a ReLU before a max pool runs after it on CUDA, with the bits of relu then pool", "[cuda][nn]") {
  if (skip_without_cuda()) return;
  struct Case {
    std::int64_t k, stride, hw;
  };
  for (const Case c : {Case{2, 2, 8}, Case{2, 2, 7}, Case{3, 2, 9}, Case{3, 1, 6}}) {
    const auto seed = fresh_seed();
    INFO("seed " << seed << ", pool " << c.k << "/" << c.stride << " on " << c.hw << "x" << c.hw);
    Model pair;
    pair.add("relu", std::make_unique<ReLU>());
    pair.add("pool", std::make_unique<MaxPool2d>(c.k, c.stride));
    pair.finalize();
    REQUIRE(pair.root().runs_after_next(0));
    pair.to_device(Device::cuda(0));
    REQUIRE(pair.root().runs_after_next(0));  // decided again for the CUDA backend
    Model relu = on_cuda(std::make_unique<ReLU>()), pool = on_cuda(std::make_unique<MaxPool2d>(c.k, c.stride));
    kernels::Queue& qp = pair.queue();
    kernels::Queue& qr = relu.queue();
    kernels::Queue& qo = pool.queue();

    // Every input stays alive until the backward that may read it.
    const Tensor t = tricky({4, 3, c.hw, c.hw}, seed + 1);
    const Tensor tp = on_device(t, qp), tr = on_device(t, qr);
    const Tensor y = pair.root().forward(tp, true);
    const Tensor h = relu.root().forward(tr, true);
    const Tensor ho = on_device(Tensor::from_vector(h.shape(), host_values(h, qr)), qo);
    const Tensor want = pool.root().forward(ho, true);
    const std::vector<float> yv = host_values(y, qp);
    CHECK(same_bits(yv, host_values(want, qo)));
    for (float v : yv) CHECK_FALSE(std::signbit(v));  // no -0 (nor anything negative) passes

    const Tensor dy = tricky(y.shape(), seed + 2);
    const Tensor dyp = on_device(dy, qp), dyo = on_device(dy, qo);
    const Tensor dx = pair.root().backward(dyp, true);
    const Tensor dpool = pool.root().backward(dyo, true);
    const Tensor dh = on_device(Tensor::from_vector(h.shape(), host_values(dpool, qo)), qr);
    const Tensor want_dx = relu.root().backward(dh, true);
    CHECK(same_bits(host_values(dx, qp), host_values(want_dx, qr)));
  }
}
