// Every layer on CUDA against the same layer on the CPU (the reference), on fresh random
// inputs: forward output, input gradient and parameter gradients, gradient accumulation
// across backward calls, zero_grad, need_dx = false; Linear + activation fusion inside a
// model; and the errors of a CUDA layer given what it cannot run.
#include <functional>
#include <memory>

#include "codistill/models/model.hpp"
#include "codistill/nn/conv2d.hpp"
#include "codistill/nn/dropout.hpp"
#include "codistill/nn/flatten.hpp"
#include "codistill/nn/activation.hpp"
#include "codistill/nn/linear.hpp"
#include "codistill/nn/maxpool2d.hpp"
#include "codistill/util/rng.hpp"
#include "support/cuda_test.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using codistill::kernels::Device;
using codistill::kernels::DType;
using codistill::kernels::Shape;
using codistill::kernels::Tensor;
using codistill::test::fresh_seed;
using codistill::test::host_values;
using codistill::test::on_device;
using codistill::test::rel_error;
using codistill::test::skip_without_cuda;
using Catch::Matchers::Contains;

namespace {

constexpr double kTol = 1e-4;      // float32, DESIGN.md section 9
constexpr double kConvTol = 5e-4;  // cuDNN sums in another order over C*k*k terms

std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

Tensor random_f32(const Shape& shape, std::uint64_t seed, double lo = -1, double hi = 1) {
  return Tensor::from_vector(shape, test::random_vector<float>(static_cast<std::size_t>(kernels::shape_numel(shape)),
                                                               seed, lo, hi));
}

// Distinct values in shuffled order: no ties inside a pooling window (cuDNN may route a
// tie's gradient elsewhere than the CPU's first maximum).
Tensor distinct_f32(const Shape& shape, std::uint64_t seed) {
  std::vector<float> v(static_cast<std::size_t>(kernels::shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * static_cast<float>(i) - 1.0f;
  Rng rng(seed);
  shuffle(v.begin(), v.size(), rng);
  return Tensor::from_vector(shape, v);
}

// Two copies of one layer (make() must build them identically), one moved to CUDA; the
// same forward and backward on both, compared.
void compare_layer(const std::function<LayerPtr()>& make, const Tensor& x, double tol, std::uint64_t seed) {
  LayerPtr cpu = make(), gpu = make();
  INFO("layer " << cpu->kind() << ", input " << kernels::shape_str(x.shape()) << ", seed " << seed);
  kernels::cuda::Stream stream(0);
  const auto ctx = stream.context();
  gpu->to_device(Device::cuda(0), ctx);
  CHECK(gpu->device() == Device::cuda(0));
  for (auto& p : gpu->params()) CHECK(p.value->device().is_cuda());

  const Tensor xd = on_device(x, ctx);
  const Tensor y = cpu->forward(x, true);
  const Tensor yd = gpu->forward(xd, true);
  REQUIRE(yd.device().is_cuda());
  REQUIRE(yd.shape() == y.shape());
  CHECK(rel_error(host_values(yd, ctx), values(y)) < tol);

  const Tensor dy = random_f32(y.shape(), seed ^ 0x5bd1e995u);
  const Tensor dyd = on_device(dy, ctx);
  cpu->zero_grad();
  gpu->zero_grad();
  const std::vector<float> dx = values(cpu->backward(dy, true));
  CHECK(rel_error(host_values(gpu->backward(dyd, true), ctx), dx) < tol);
  auto cpu_params = cpu->params(), gpu_params = gpu->params();
  REQUIRE(cpu_params.size() == gpu_params.size());
  std::vector<std::vector<float>> grads;
  for (std::size_t k = 0; k < cpu_params.size(); ++k) {
    INFO("grad of " << cpu_params[k].name);
    grads.push_back(values(*cpu_params[k].grad));
    CHECK(rel_error(host_values(*gpu_params[k].grad, ctx), grads.back()) < tol);
  }

  // A second backward adds to the grads; after zero_grad, need_dx = false still gives them.
  cpu->backward(dy, true);
  gpu->backward(dyd, true);
  for (std::size_t k = 0; k < cpu_params.size(); ++k) {
    INFO("accumulated grad of " << cpu_params[k].name);
    CHECK(rel_error(host_values(*gpu_params[k].grad, ctx), values(*cpu_params[k].grad)) < tol);
  }
  gpu->zero_grad();
  gpu->forward(xd, true);
  CHECK_FALSE(gpu->backward(dyd, false).defined());
  for (std::size_t k = 0; k < cpu_params.size(); ++k) {
    INFO("grad after zero_grad of " << cpu_params[k].name);
    CHECK(rel_error(host_values(*gpu_params[k].grad, ctx), grads[k]) < tol);
  }
}

template <class L, class... A>
std::function<LayerPtr()> maker(std::uint64_t seed, A... args) {
  return [=] {
    LayerPtr l = std::make_unique<L>(args...);
    Rng rng(seed);
    l->init_params(rng, "kaiming_uniform");
    return l;
  };
}

}  // namespace

TEST_CASE("Linear on CUDA matches the CPU", "[cuda][nn]") {
  if (skip_without_cuda()) return;
  const auto seed = fresh_seed();
  compare_layer(maker<Linear>(seed, 37, 19), random_f32({13, 37}, seed + 1), kTol, seed);
  compare_layer(maker<Linear>(seed, 64, 10, false), random_f32({32, 64}, seed + 2), kTol, seed);
  compare_layer(maker<Linear>(seed, 5, 300), random_f32({1, 5}, seed + 3), kTol, seed);
}

TEST_CASE("Conv2d on CUDA matches the CPU", "[cuda][nn]") {
  if (skip_without_cuda()) return;
  const auto seed = fresh_seed();
  compare_layer(maker<Conv2d>(seed, 3, 5, 3), random_f32({4, 3, 9, 10}, seed + 1), kConvTol, seed);
  compare_layer(maker<Conv2d>(seed, 2, 4, 5, 2, 1), random_f32({3, 2, 11, 12}, seed + 2), kConvTol, seed);
  compare_layer(maker<Conv2d>(seed, 1, 8, 5, 1, Conv2d::kSamePadding, false), random_f32({2, 1, 28, 28}, seed + 3),
                kConvTol, seed);
}

TEST_CASE("MaxPool2d on CUDA matches the CPU", "[cuda][nn]") {
  if (skip_without_cuda()) return;
  const auto seed = fresh_seed();
  compare_layer(maker<MaxPool2d>(seed, 2), distinct_f32({2, 3, 8, 8}, seed), kTol, seed);
  compare_layer(maker<MaxPool2d>(seed, 3, 2), distinct_f32({2, 2, 9, 9}, seed + 1), kTol, seed);
}

TEST_CASE("ReLU, GELU and Flatten on CUDA match the CPU", "[cuda][nn]") {
  if (skip_without_cuda()) return;
  const auto seed = fresh_seed();
  // ReLU inputs at least 0.1 away from the kink.
  std::vector<float> v = test::random_vector<float>(6 * 50, seed, 0.1, 1.0);
  Rng signs(seed);
  for (auto& e : v) e = signs.uniform() < 0.5 ? -e : e;
  compare_layer(maker<ReLU>(seed), Tensor::from_vector({6, 50}, v), kTol, seed);
  compare_layer(maker<GELU>(seed), random_f32({7, 33}, seed + 1, -4, 4), kTol, seed);
  compare_layer(maker<Flatten>(seed), random_f32({3, 2, 4, 5}, seed + 2), kTol, seed);
}

TEST_CASE("Dropout on CUDA draws the CPU's masks", "[cuda][nn]") {
  if (skip_without_cuda()) return;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  compare_layer(maker<Dropout>(seed, 0.3), random_f32({16, 40}, seed + 1), kTol, seed);
  // Mask by mask, over several forwards (the generator advances alike).
  Dropout cpu(0.5), gpu(0.5);
  Rng r1(seed), r2(seed);
  cpu.init_params(r1, "kaiming_uniform");
  gpu.init_params(r2, "kaiming_uniform");
  kernels::cuda::Stream stream(0);
  gpu.to_device(Device::cuda(0), stream.context());
  const Tensor x = random_f32({8, 100}, seed + 2);
  const Tensor xd = on_device(x, stream.context());
  for (int i = 0; i < 3; ++i) {
    cpu.forward(x, true);
    gpu.forward(xd, true);
    CHECK(host_values(gpu.mask(), stream.context()) == values(cpu.mask()));
  }
  CHECK(gpu.rng()->state() == cpu.rng()->state());
  // Inference: the input itself.
  CHECK(gpu.forward(xd, false).raw() == xd.raw());
}

TEST_CASE("a model on CUDA fuses Linear with the activation after it, and unfuses on the way back", "[cuda][nn]") {
  if (skip_without_cuda()) return;
  for (const char* act : {"relu", "gelu"}) {
    const auto seed = fresh_seed();
    INFO(act << ", seed " << seed);
    auto build = [&] {
      ModelConfig mc;
      mc.kind = "mlp";
      mc.hidden = {48, 24};
      mc.activation = act;
      mc.input_shape = {1, 6, 6};
      mc.classes = 7;
      Rng rng(seed);
      return build_model(mc, rng);
    };
    Model cpu = build(), gpu = build();
    kernels::cuda::Stream stream(0);
    const auto ctx = stream.context();
    gpu.to_device(Device::cuda(0), ctx);
    CHECK(gpu.device() == Device::cuda(0));
    auto* fc1 = dynamic_cast<Linear*>(gpu.layers()[1].second.get());
    REQUIRE(fc1);
    CHECK(fc1->fused_activation() != kernels::cuda::Activation::none);
    auto* last = dynamic_cast<Linear*>(gpu.layers().back().second.get());
    REQUIRE(last);
    CHECK(last->fused_activation() == kernels::cuda::Activation::none);  // nothing after it

    const Tensor x = random_f32({9, 1, 6, 6}, seed + 1, -2, 2);
    const Tensor dlogits = random_f32({9, 7}, seed + 2);
    cpu.zero_grad();
    gpu.zero_grad();
    const Tensor logits = cpu.forward(x, true);
    CHECK(rel_error(host_values(gpu.forward(on_device(x, ctx), true), ctx), values(logits)) < kTol);
    cpu.backward(dlogits);
    gpu.backward(on_device(dlogits, ctx));
    auto pc = cpu.params(), pg = gpu.params();
    for (std::size_t k = 0; k < pc.size(); ++k) {
      INFO("grad of " << pc[k].path);
      CHECK(rel_error(host_values(*pg[k].grad, ctx), values(*pc[k].grad)) < kTol);
    }
    // Back on the CPU: unfused, the same logits as the CPU model.
    gpu.to_device(Device::cpu());
    CHECK(fc1->fused_activation() == kernels::cuda::Activation::none);
    CHECK(rel_error(values(gpu.forward(x, true)), values(logits)) < kTol);
  }
}

TEST_CASE("CUDA layers refuse float64, and inputs on another device", "[cuda][nn]") {
  if (skip_without_cuda()) return;
  kernels::cuda::Stream stream(0);
  Linear f64(4, 3);
  f64.to_dtype(DType::f64);
  CHECK_THROWS_WITH(f64.to_device(Device::cuda(0), stream.context()), Contains("float32"));
  CHECK(f64.device().is_cpu());

  Linear fc(4, 3);
  fc.to_device(Device::cuda(0), stream.context());
  CHECK_THROWS_WITH(fc.forward(Tensor::zeros({2, 4}), true), Contains("input is on cpu"));
  ReLU relu;
  relu.to_device(Device::cuda(0), stream.context());
  const Tensor x64 = Tensor::zeros({2, 4}, DType::f64, Device::cuda(0));
  CHECK_THROWS_WITH(relu.forward(x64, true), Contains("float32"));
}
