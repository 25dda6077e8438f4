// A resnet moved to CUDA, which has Op::batchnorm_activation and Op::add_activation: its
// containers fuse the BatchNorm -> ReLU and Residual -> ReLU pairs there as on the CPU; the
// fused model computes what the fused CPU model computes (logits, gradients, running
// statistics, within the float32 bound of the CUDA layer tests), and what the same model
// on CUDA with the pairs unfused by hand computes, bit for bit (the fused kernels round as
// batch norm, the sum and the relu apart: the relu rule and mask are those of the activation
// kernels); back on the CPU the pairs stay fused.
#include <cstring>
#include <string>
#include <vector>

#include "codistill/models/model.hpp"
#include "codistill/nn/layers/activation.hpp"
#include "codistill/nn/layers/batchnorm.hpp"
#include "codistill/nn/blocks/residual.hpp"
#include "codistill/nn/blocks/sequential.hpp"
#include "codistill/util/rng.hpp"
#include "support/cuda_test.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using codistill::kernels::Activation;
using codistill::kernels::Device;
using codistill::kernels::DType;
using codistill::kernels::Tensor;
using codistill::test::host_values;
using codistill::test::on_device;
using codistill::test::rel_error;
using codistill::test::skip_without_cuda;

namespace {

constexpr double kTol = 5e-4;  // float32, cuDNN's convolutions summing in another order

std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

// How many BatchNorm and Residual modules below m have a fused activation.
int fused_count(Module& m) {
  int n = 0;
  if (auto* bn = dynamic_cast<BatchNorm*>(&m)) n += bn->fused_activation() != Activation::none;
  if (auto* res = dynamic_cast<Residual*>(&m)) n += res->fused_activation() != Activation::none;
  m.for_each_child([&](const std::string&, Module& child) { n += fused_count(child); });
  return n;
}

// Undoes the containers' fusion below m (after the model is on its device, which decides it
// again): each fused BatchNorm / Residual goes back to no activation, and the ReLU after it
// computes again. Returns how many pairs it split.
int unfuse(Module& m) {
  int n = 0;
  bool split = false;  // the previous child was a fused pair's first half
  m.for_each_child([&](const std::string&, Module& child) {
    if (auto* act = dynamic_cast<ActivationLayer*>(&child); act && split) act->set_passthrough(false);
    split = false;
    if (auto* bn = dynamic_cast<BatchNorm*>(&child); bn && bn->fused_activation() != Activation::none) {
      bn->set_fused_activation(Activation::none);
      split = true;
    }
    if (auto* res = dynamic_cast<Residual*>(&child); res && res->fused_activation() != Activation::none) {
      res->set_fused_activation(Activation::none);
      split = true;
    }
    n += split;
    n += unfuse(child);
  });
  return n;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("a resnet on CUDA fuses batch norm + relu and sum + relu, as the CPU model", "[cuda][models]") {
  if (skip_without_cuda()) return;
  REQUIRE(test::cuda().supports(kernels::Op::batchnorm_activation, DType::f32));
  REQUIRE(test::cuda().supports(kernels::Op::add_activation, DType::f32));
  const auto seed = test::fresh_seed();
  INFO("seed " << seed);
  ModelConfig cfg;
  cfg.kind = "resnet";
  cfg.channels = {8, 16};
  cfg.blocks = 1;
  cfg.hidden = {};
  cfg.input_shape = {1, 12, 12};
  cfg.classes = 10;
  cfg.memory_format = "nchw";  // what CUDA runs
  Rng ra(seed), rb(seed), rc(seed);
  Model cpu = build_model(cfg, ra), gpu = build_model(cfg, rb), apart = build_model(cfg, rc);
  CHECK(fused_count(cpu.root()) == 3 + 2);  // stem and each block's first batch norm; each block
  gpu.to_device(Device::cuda(0));
  CHECK(fused_count(gpu.root()) == 3 + 2);
  apart.to_device(Device::cuda(0));
  REQUIRE(unfuse(apart.root()) == 3 + 2);
  REQUIRE(fused_count(apart.root()) == 0);

  kernels::Queue& q = gpu.queue();
  kernels::Queue& qa = apart.queue();
  const Tensor x = Tensor::from_vector({5, 1, 12, 12}, test::random_vector<float>(5 * 144, seed + 1, -2, 2));
  const Tensor dlogits = Tensor::from_vector({5, 10}, test::random_vector<float>(50, seed + 2));
  cpu.zero_grad(), gpu.zero_grad(), apart.zero_grad();
  const auto logits = host_values(gpu.forward(on_device(x, q), true), q);
  CHECK(rel_error(logits, values(cpu.forward(x, true))) < kTol);
  CHECK(same_bits(logits, host_values(apart.forward(on_device(x, qa), true), qa)));
  cpu.backward(dlogits);
  gpu.backward(on_device(dlogits, q));
  apart.backward(on_device(dlogits, qa));
  codistill::test::check_grads_close(cpu, gpu, q, kTol);
  auto pg = gpu.params(), pa = apart.params();
  REQUIRE(pg.size() == pa.size());
  for (std::size_t k = 0; k < pg.size(); ++k) {
    INFO("grad of " << pg[k].path << ", fused against apart on CUDA");
    CHECK(same_bits(host_values(*pg[k].grad, q), host_values(*pa[k].grad, qa)));
  }
  auto bc = cpu.buffers(), bg = gpu.buffers(), ba = apart.buffers();
  for (std::size_t k = 0; k < bc.size(); ++k) {
    INFO(bc[k].path);
    CHECK(rel_error(host_values(*bg[k].value, q), values(*bc[k].value)) < kTol);
    CHECK(same_bits(host_values(*bg[k].value, q), host_values(*ba[k].value, qa)));
  }
  const auto eval = host_values(gpu.forward(on_device(x, q), false), q);
  CHECK(rel_error(eval, values(cpu.forward(x, false))) < kTol);
  CHECK(same_bits(eval, host_values(apart.forward(on_device(x, qa), false), qa)));

  gpu.to_device(Device::cpu());  // the CPU backend decides again: still fused
  CHECK(fused_count(gpu.root()) == 3 + 2);
  CHECK(rel_error(values(gpu.forward(x, false)), values(cpu.forward(x, false))) < kTol);
}
