// Every layer on CUDA against the same layer on the CPU (the reference), on fresh random
// inputs: forward output, input gradient and parameter gradients, gradient accumulation
// across backward calls, zero_grad, need_dx = false; Linear + activation fusion inside a
// model; and the errors of a model on CUDA given what it cannot run.
//
// Layers run inside a model (its parameter arena and its queue): each layer is the only
// module of a Model, moved with Model::to_device; its CPU twin is the same layer in a model
// that stays on the CPU.
#include <functional>
#include <memory>
#include <vector>

#include "codistill/models/model.hpp"
#include "codistill/nn/layers/activation.hpp"
#include "codistill/nn/layers/conv2d.hpp"
#include "codistill/nn/layers/dropout.hpp"
#include "codistill/nn/layers/flatten.hpp"
#include "codistill/nn/layers/linear.hpp"
#include "codistill/nn/layers/maxpool2d.hpp"
#include "codistill/util/rng.hpp"
#include "support/cuda_test.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using codistill::kernels::Activation;
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

bool all_zero(const std::vector<float>& v) {
  for (float e : v)
    if (e != 0.0f) return false;
  return true;
}

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

// A model whose only module is `layer` (its parameters then live in the model's arena).
Model model_of(LayerPtr layer) {
  Model m;
  m.add("layer", std::move(layer));
  m.finalize();
  return m;
}

Module& layer_of(Model& m) { return *m.root().children()[0].second; }

// Two copies of one layer (make() must build them identically), each in its own model, one
// model moved to CUDA; the same forward and backward on both, compared.
void compare_layer(const std::function<LayerPtr()>& make, const Tensor& x, double tol, std::uint64_t seed) {
  Model cpu = model_of(make()), gpu = model_of(make());
  Module& lc = layer_of(cpu);
  Module& lg = layer_of(gpu);
  INFO("layer " << lc.kind() << ", input " << kernels::shape_str(x.shape()) << ", seed " << seed);
  gpu.to_device(Device::cuda(0));
  kernels::Queue& q = gpu.queue();
  CHECK(gpu.device() == Device::cuda(0));
  CHECK(lg.device() == Device::cuda(0));
  CHECK(&lg.queue() == &q);
  CHECK(lc.device().is_cpu());
  for (auto& p : lg.params()) {
    CHECK(p.value->device().is_cuda());
    CHECK(p.grad->device().is_cuda());
  }

  const Tensor xd = on_device(x, q);
  const Tensor y = lc.forward(x, true);
  const Tensor yd = lg.forward(xd, true);
  REQUIRE(yd.device() == Device::cuda(0));
  REQUIRE(yd.shape() == y.shape());
  CHECK(rel_error(host_values(yd, q), values(y)) < tol);

  const Tensor dy = random_f32(y.shape(), seed ^ 0x5bd1e995u);
  const Tensor dyd = on_device(dy, q);
  cpu.zero_grad();
  gpu.zero_grad();
  const std::vector<float> dx = values(lc.backward(dy, true));
  const Tensor dxd = lg.backward(dyd, true);
  REQUIRE(dxd.device() == Device::cuda(0));
  REQUIRE(dxd.shape() == x.shape());
  CHECK(rel_error(host_values(dxd, q), dx) < tol);
  auto cpu_params = lc.params(), gpu_params = lg.params();
  REQUIRE(cpu_params.size() == gpu_params.size());
  std::vector<std::vector<float>> grads;
  for (std::size_t k = 0; k < cpu_params.size(); ++k) {
    INFO("grad of " << cpu_params[k].name);
    grads.push_back(values(*cpu_params[k].grad));
    CHECK(rel_error(host_values(*gpu_params[k].grad, q), grads.back()) < tol);
  }

  // A second backward adds to the grads.
  lc.backward(dy, true);
  lg.backward(dyd, true);
  for (std::size_t k = 0; k < cpu_params.size(); ++k) {
    INFO("accumulated grad of " << cpu_params[k].name);
    CHECK(rel_error(host_values(*gpu_params[k].grad, q), values(*cpu_params[k].grad)) < tol);
  }

  // zero_grad zeroes the whole gradient block (padding included) on the model's queue,
  // after the backward queued before it.
  gpu.zero_grad();
  for (std::size_t k = 0; k < gpu_params.size(); ++k) {
    INFO("grad after zero_grad of " << gpu_params[k].name);
    CHECK(all_zero(host_values(*gpu_params[k].grad, q)));
  }
  CHECK(all_zero(host_values(gpu.arena().grads(), q)));

  // need_dx = false returns no input gradient and still gives the parameter grads.
  lg.forward(xd, true);
  CHECK_FALSE(lg.backward(dyd, false).defined());
  for (std::size_t k = 0; k < cpu_params.size(); ++k) {
    INFO("grad after zero_grad and a backward without dx of " << cpu_params[k].name);
    CHECK(rel_error(host_values(*gpu_params[k].grad, q), grads[k]) < tol);
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
  // Mask by mask, over several forwards (the generator advances alike). The CUDA forwards
  // run back to back, each mask kept by a copy queued behind it: a forward must not refill
  // the staging memory before the previous mask's upload has read it.
  Model cpu = model_of(maker<Dropout>(seed, 0.5)()), gpu = model_of(maker<Dropout>(seed, 0.5)());
  gpu.to_device(Device::cuda(0));
  kernels::Queue& q = gpu.queue();
  auto& dc = dynamic_cast<Dropout&>(layer_of(cpu));
  auto& dg = dynamic_cast<Dropout&>(layer_of(gpu));
  const Tensor x = random_f32({8, 100}, seed + 2);
  const Tensor xd = on_device(x, q);
  std::vector<Tensor> want, got;
  for (int i = 0; i < 3; ++i) {
    dc.forward(x, true);
    want.push_back(dc.mask().clone());
    dg.forward(xd, true);
    REQUIRE(dg.mask().device() == Device::cuda(0));
    Tensor kept = Tensor::empty(dg.mask().shape(), dg.mask().dtype(), q.device());
    q.copy(kept, dg.mask());
    got.push_back(kept);
  }
  for (int i = 0; i < 3; ++i) {
    INFO("mask " << i);
    CHECK(host_values(got[static_cast<std::size_t>(i)], q) == values(want[static_cast<std::size_t>(i)]));
  }
  CHECK(dg.rng()->state() == dc.rng()->state());
  // Inference: the input itself.
  CHECK(dg.forward(xd, false).raw() == xd.raw());
}

TEST_CASE("a model on CUDA fuses Linear with the activation after it, and re-decides on the way back",
          "[cuda][nn]") {
  if (skip_without_cuda()) return;
  // Sequential fuses where the backend has the op; the CUDA backend has the fused bias +
  // activation pass for float32.
  REQUIRE(test::cuda().supports(kernels::Op::linear_activation, DType::f32));
  const bool cpu_fuses = kernels::backend_for(Device::cpu()).supports(kernels::Op::linear_activation, DType::f32);
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
    // The CPU twin runs unfused (set by hand: the CPU backend would fuse too), so the fused
    // pass on CUDA is checked against the plain Linear -> activation composition.
    for (std::size_t i = 0; i + 1 < cpu.root().children().size(); ++i) {
      auto* fc = dynamic_cast<Linear*>(cpu.root().children()[i].second.get());
      auto* a = dynamic_cast<ActivationLayer*>(cpu.root().children()[i + 1].second.get());
      if (!fc || !a) continue;
      fc->set_fused_activation(Activation::none);
      a->set_passthrough(false);
    }

    gpu.to_device(Device::cuda(0));
    kernels::Queue& q = gpu.queue();
    CHECK(gpu.device() == Device::cuda(0));
    const auto& children = gpu.root().children();  // flatten, fc1, act1, fc2, act2, fc3
    REQUIRE(children.size() == 6);
    auto* fc1 = dynamic_cast<Linear*>(children[1].second.get());
    auto* act1 = dynamic_cast<ActivationLayer*>(children[2].second.get());
    auto* fc2 = dynamic_cast<Linear*>(children[3].second.get());
    auto* act2 = dynamic_cast<ActivationLayer*>(children[4].second.get());
    auto* last = dynamic_cast<Linear*>(children.back().second.get());
    REQUIRE(fc1);
    REQUIRE(act1);
    REQUIRE(fc2);
    REQUIRE(act2);
    REQUIRE(last);
    CHECK(act1->kind() == act);
    CHECK(fc1->fused_activation() == act1->activation());
    CHECK(act1->passthrough());
    CHECK(fc2->fused_activation() == act2->activation());
    CHECK(act2->passthrough());
    CHECK(last->fused_activation() == Activation::none);  // nothing after it

    const Tensor x = random_f32({9, 1, 6, 6}, seed + 1, -2, 2);
    const Tensor dlogits = random_f32({9, 7}, seed + 2);
    cpu.zero_grad();
    gpu.zero_grad();
    const Tensor logits = cpu.forward(x, true);
    const Tensor xd = on_device(x, q);
    const Tensor logits_dev = gpu.forward(xd, true);
    REQUIRE(logits_dev.device() == Device::cuda(0));
    CHECK(rel_error(host_values(logits_dev, q), values(logits)) < kTol);
    cpu.backward(dlogits);
    gpu.backward(on_device(dlogits, q));
    codistill::test::check_grads_close(cpu, gpu, q, kTol);
    // The logits are the last module's own buffer: the next forward of that shape reuses it.
    CHECK(gpu.forward(xd, false).raw() == logits_dev.raw());

    // Back on the CPU the fusion is decided again, by the CPU backend; the same logits.
    gpu.to_device(Device::cpu());
    CHECK(gpu.device().is_cpu());
    CHECK(fc1->fused_activation() == (cpu_fuses ? act1->activation() : Activation::none));
    CHECK(act1->passthrough() == cpu_fuses);
    CHECK(last->fused_activation() == Activation::none);
    CHECK(rel_error(values(gpu.forward(x, true)), values(logits)) < kTol);
  }
}

TEST_CASE("CUDA refuses float64 models and inputs, and inputs on another device", "[cuda][nn]") {
  if (skip_without_cuda()) return;
  // A float64 model is refused before anything moves: it stays on the CPU, usable.
  Model f64 = model_of(std::make_unique<Linear>(4, 3));
  f64.to_dtype(DType::f64);
  CHECK_THROWS_WITH(f64.to_device(Device::cuda(0)), Contains("float64") && Contains("cuda"));
  CHECK(f64.device().is_cpu());
  CHECK(f64.arena().values().device().is_cpu());
  for (auto& p : f64.params()) {
    CHECK(p.value->device().is_cpu());
    CHECK(p.value->dtype() == DType::f64);
  }
  CHECK(f64.forward(Tensor::zeros({2, 4}, DType::f64), true).dtype() == DType::f64);

  // A model on CUDA does not become float64 there, and takes inputs only from its device.
  Model fc = model_of(std::make_unique<Linear>(4, 3));
  fc.to_device(Device::cuda(0));
  CHECK_THROWS_WITH(fc.to_dtype(DType::f64), Contains("only on the CPU"));
  CHECK(fc.arena().values().dtype() == DType::f32);
  CHECK_THROWS_WITH(fc.forward(Tensor::zeros({2, 4}), true), Contains("input is on cpu"));
  CHECK_THROWS_WITH(layer_of(fc).forward(Tensor::zeros({2, 4}), true), Contains("input is on cpu"));
  CHECK_THROWS_WITH(fc.backward(Tensor::zeros({2, 3})), Contains("input is on cpu"));
  CHECK_THROWS_WITH(layer_of(fc).forward(Tensor::zeros({2, 4}, DType::f64, Device::cuda(0)), true),
                    Contains("float64"));
  // The other way round: a CPU model given a tensor on CUDA.
  Model host = model_of(std::make_unique<Linear>(4, 3));
  CHECK_THROWS_WITH(host.forward(Tensor::zeros({2, 4}, DType::f32, Device::cuda(0)), true),
                    Contains("input is on cuda:0"));

  // A layer without parameters takes its dtype from the input: the CUDA op refuses float64.
  Model relu = model_of(std::make_unique<ReLU>());
  relu.to_device(Device::cuda(0));
  const Tensor x64 = Tensor::zeros({2, 4}, DType::f64, Device::cuda(0));
  CHECK_THROWS_WITH(layer_of(relu).forward(x64, true), Contains("float64"));
}
