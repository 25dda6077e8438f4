// A resnet moved to CUDA, which has neither Op::batchnorm_activation nor Op::add_activation:
// its containers unfuse the BatchNorm -> ReLU and Residual -> ReLU pairs there, it computes
// what the fused CPU model computes (logits, gradients, running statistics, within the
// float32 bound of the CUDA layer tests), and back on the CPU the pairs fuse again.
#include <string>
#include <vector>

#include "codistill/models/model.hpp"
#include "codistill/nn/batchnorm.hpp"
#include "codistill/nn/residual.hpp"
#include "codistill/nn/sequential.hpp"
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

}  // namespace

TEST_CASE("a resnet on CUDA runs batch norm, sums and relu apart, as the fused CPU model", "[cuda][models]") {
  if (skip_without_cuda()) return;
  REQUIRE_FALSE(test::cuda().supports(kernels::Op::batchnorm_activation, DType::f32));
  REQUIRE_FALSE(test::cuda().supports(kernels::Op::add_activation, DType::f32));
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
  Rng ra(seed), rb(seed);
  Model cpu = build_model(cfg, ra), gpu = build_model(cfg, rb);
  CHECK(fused_count(cpu.root()) == 3 + 2);  // stem and each block's first batch norm; each block
  gpu.to_device(Device::cuda(0));
  CHECK(fused_count(gpu.root()) == 0);

  kernels::Queue& q = gpu.queue();
  const Tensor x = Tensor::from_vector({5, 1, 12, 12}, test::random_vector<float>(5 * 144, seed + 1, -2, 2));
  const Tensor dlogits = Tensor::from_vector({5, 10}, test::random_vector<float>(50, seed + 2));
  cpu.zero_grad(), gpu.zero_grad();
  CHECK(rel_error(host_values(gpu.forward(on_device(x, q), true), q), values(cpu.forward(x, true))) < kTol);
  cpu.backward(dlogits);
  gpu.backward(on_device(dlogits, q));
  codistill::test::check_grads_close(cpu, gpu, q, kTol);
  auto bc = cpu.buffers(), bg = gpu.buffers();
  for (std::size_t k = 0; k < bc.size(); ++k) {
    INFO(bc[k].path);
    CHECK(rel_error(host_values(*bg[k].value, q), values(*bc[k].value)) < kTol);
  }
  CHECK(rel_error(host_values(gpu.forward(on_device(x, q), false), q), values(cpu.forward(x, false))) < kTol);

  gpu.to_device(Device::cpu());  // the CPU backend decides again: fused
  CHECK(fused_count(gpu.root()) == 3 + 2);
  CHECK(rel_error(values(gpu.forward(x, false)), values(cpu.forward(x, false))) < kTol);
}
