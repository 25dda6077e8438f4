// Full training steps on CUDA against the CPU: the same model (same seed), the same batches,
// forward, fused loss (with a teacher term), backward and optimizer step, a few times; the
// losses, parameters and optimizer slots agree to float32 rounding. mlp and cnn, SGD (with
// momentum, Nesterov and weight decay) and AdamW; dropout included (same masks).
#include <cstdint>
#include <vector>

#include "codistill/models/model.hpp"
#include "codistill/optim/optimizer.hpp"
#include "codistill/util/device_memory.hpp"
#include "codistill/util/rng.hpp"
#include "kernels/cpu/distill_loss.hpp"
#include "kernels/cuda/allocator.hpp"
#include "kernels/cuda/distill_loss.hpp"
#include "support/cuda_test.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using codistill::kernels::Device;
using codistill::kernels::Tensor;
using codistill::test::host_values;
using codistill::test::on_device;
using codistill::test::rel_error;

namespace {

ModelConfig small_model(const std::string& kind) {
  ModelConfig mc;
  mc.kind = kind;
  mc.hidden = {32, 16};
  mc.channels = {4, 6};
  mc.kernel_size = 3;
  mc.pool = 2;
  mc.dropout = 0.1;
  mc.input_shape = {1, 8, 8};
  mc.classes = 5;
  return mc;
}

std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

struct Case {
  const char* name;
  OptimizerConfig opt;
  double tol;
};

std::vector<Case> cases() {
  OptimizerConfig sgd;
  sgd.kind = "sgd";
  sgd.lr = 0.05;
  sgd.momentum = 0.9;
  sgd.weight_decay = 1e-4;
  OptimizerConfig nesterov = sgd;
  nesterov.nesterov = true;
  OptimizerConfig plain = sgd;
  plain.momentum = 0;
  OptimizerConfig adamw;
  adamw.kind = "adamw";
  adamw.lr = 1e-3;
  adamw.weight_decay = 0.01;
  // AdamW divides by sqrt(v): gradients near zero carry float32 noise into the update at
  // full step size, hence a looser bound than SGD's.
  return {{"sgd", sgd, 2e-4}, {"sgd nesterov", nesterov, 2e-4}, {"sgd plain", plain, 2e-4}, {"adamw", adamw, 1e-3}};
}

}  // namespace

TEST_CASE("training steps on CUDA match the CPU: mlp and cnn, SGD and AdamW", "[cuda][models]") {
  if (test::skip_without_cuda()) return;
  for (std::string kind : {"mlp", "cnn"}) {
    for (const Case& c : cases()) {
      const auto seed = test::fresh_seed();
      INFO(kind << ", " << c.name << ", seed " << seed);
      const ModelConfig mc = small_model(kind);
      Rng r1(seed), r2(seed);
      Model cpu = build_model(mc, r1), gpu = build_model(mc, r2);
      kernels::cuda::Stream stream(0);
      const auto ctx = stream.context();
      gpu.to_device(Device::cuda(0), ctx);
      auto opt_cpu = make_optimizer(c.opt, cpu.params());
      auto opt_gpu = make_optimizer(c.opt, gpu.params());
      opt_gpu->set_cuda_context(ctx);

      const std::int64_t B = 16, V = 5;
      kernels::cpu::DistillLossParams lp;
      lp.temperature = 2.0;
      lp.weight = 0.5;
      Tensor dlogits = Tensor::empty({B, V});
      Tensor dlogits_dev = Tensor::empty({B, V}, kernels::DType::f32, Device::cuda(0));
      DeviceBuffer labels_dev(B * sizeof(std::int32_t), 0);
      for (int step = 0; step < 4; ++step) {
        INFO("step " << step);
        const Tensor x = Tensor::from_vector({B, 1, 8, 8}, test::random_vector<float>(B * 64, seed + 10 + step, -2, 2));
        const Tensor teacher = Tensor::from_vector({B, V}, test::random_vector<float>(B * V, seed + 20 + step, -3, 3));
        Rng lr(seed + 30 + step);
        std::vector<std::int32_t> labels(B);
        for (auto& y : labels) y = static_cast<std::int32_t>(lr.below(V));
        const float* t_cpu = teacher.data<float>();

        cpu.zero_grad();
        const Tensor logits = cpu.forward(x, true);
        const auto want = kernels::cpu::distill_loss<float>(logits.data<float>(), &t_cpu, 1, labels.data(),
                                                            dlogits.data<float>(), B, V, lp);
        cpu.backward(dlogits);
        opt_cpu->step(c.opt.lr);

        gpu.zero_grad();
        const Tensor x_dev = on_device(x, ctx), teacher_dev = on_device(teacher, ctx);
        kernels::cuda::memcpy_async(labels_dev.data(), labels.data(), labels_dev.size(),
                                    kernels::cuda::CopyKind::host_to_device, ctx);
        const Tensor logits_dev = gpu.forward(x_dev, true);
        const float* t_gpu = teacher_dev.data<float>();
        const auto got = kernels::cuda::distill_loss(logits_dev.data<float>(), &t_gpu, 1, labels_dev.as<std::int32_t>(),
                                                     dlogits_dev.data<float>(), B, V, lp, 0, ctx.stream);
        gpu.backward(dlogits_dev);
        opt_gpu->step(c.opt.lr);
        CHECK(got.loss == Approx(want.loss).epsilon(c.tol));
        CHECK(got.distill == Approx(want.distill).epsilon(c.tol));
      }
      CHECK(opt_gpu->steps_taken() == opt_cpu->steps_taken());
      auto pc = cpu.params(), pg = gpu.params();
      REQUIRE(pc.size() == pg.size());
      for (std::size_t k = 0; k < pc.size(); ++k) {
        INFO("parameter " << pc[k].path);
        CHECK(pg[k].value->device().is_cuda());
        CHECK(rel_error(host_values(*pg[k].value, ctx), values(*pc[k].value)) < c.tol);
      }
      auto sc = opt_cpu->state(), sg = opt_gpu->state();
      REQUIRE(sc.size() == sg.size());
      for (auto& [path, slots] : sc)
        for (auto& [slot, tensor] : slots) {
          INFO("optimizer slot " << path << "/" << slot);
          Tensor* dev = sg.at(path).at(slot);
          CHECK(dev->device().is_cuda());
          CHECK(rel_error(host_values(*dev, ctx), values(*tensor)) < c.tol);
        }
    }
  }
}

TEST_CASE("an optimizer over CUDA parameters needs the model's stream", "[cuda][optim]") {
  if (test::skip_without_cuda()) return;
  Rng rng(1);
  Model m = build_model(small_model("mlp"), rng);
  kernels::cuda::Stream stream(0);
  m.to_device(Device::cuda(0), stream.context());
  OptimizerConfig oc;
  auto opt = make_optimizer(oc, m.params());
  CHECK_THROWS_WITH(opt->step(0.1), Catch::Matchers::Contains("set_cuda_context"));
}
