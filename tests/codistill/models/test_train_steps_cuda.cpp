// Full training steps on CUDA against the CPU: the same model (same seed), the same batches,
// forward, fused loss (with a teacher term), backward and optimizer step, a few times; the
// losses, parameters and optimizer slots agree to float32 rounding. mlp and cnn, SGD (with
// momentum, Nesterov and weight decay) and AdamW; dropout included (same masks). And an
// optimizer made before its model moved follows it onto CUDA, slots and all. And the gpt kind.
#include <cstdint>
#include <string>
#include <vector>

#include "codistill/models/model.hpp"
#include "codistill/optim/optimizer.hpp"
#include "codistill/util/rng.hpp"
#include "support/cuda_test.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using codistill::kernels::Device;
using codistill::kernels::DType;
using codistill::kernels::Tensor;
using codistill::test::host_values;
using codistill::test::on_device;
using codistill::test::rel_error;

namespace {

constexpr std::int64_t kBatch = 16, kClasses = 5;

ModelConfig small_model(const std::string& kind) {
  ModelConfig mc;
  mc.kind = kind;
  mc.hidden = {32, 16};
  mc.channels = {4, 6};
  mc.kernel_size = 3;
  mc.pool = 2;
  mc.dropout = 0.1;
  mc.input_shape = {1, 8, 8};
  mc.classes = kClasses;
  return mc;
}

std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

// The host inputs of one step: a batch, its labels and one teacher's logits.
struct Batch {
  Tensor x, labels, teacher;
};

Batch make_batch(std::uint64_t seed) {
  Batch b;
  b.x = Tensor::from_vector({kBatch, 1, 8, 8}, test::random_vector<float>(kBatch * 64, seed, -2, 2));
  b.teacher = Tensor::from_vector({kBatch, kClasses}, test::random_vector<float>(kBatch * kClasses, seed + 1, -3, 3));
  b.labels = Tensor::empty({kBatch}, DType::i32);
  Rng rng(seed + 2);
  for (std::int64_t i = 0; i < kBatch; ++i)
    b.labels.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng.below(kClasses));
  return b;
}

kernels::DistillLossParams loss_params() {
  kernels::DistillLossParams lp;
  lp.temperature = 2.0;
  lp.weight = 0.5;
  return lp;
}

// One training step of m on its queue, whatever its device: the inputs copied there, grads
// zeroed, forward, the fused loss against the teacher, backward, update. Ends with the
// queue drained, so that the device copies made here may be released.
kernels::DistillLossResult train_step(Model& m, Optimizer& opt, double lr, const Batch& b) {
  kernels::Queue& q = m.queue();
  const Tensor x = on_device(b.x, q), labels = on_device(b.labels, q), teacher = on_device(b.teacher, q);
  Tensor dlogits = Tensor::empty({kBatch, kClasses}, DType::f32, q.device());
  m.zero_grad();
  const Tensor logits = m.forward(x, true);
  REQUIRE(logits.device() == q.device());
  const auto loss = q.backend().distill_loss(logits, {&teacher}, labels, &dlogits, loss_params(), q);
  m.backward(dlogits);
  opt.step(lr);
  m.synchronize();
  return loss;
}

// Parameters, and the optimizer's slots, of the CUDA model against the CPU model's.
void check_state(Model& cpu, Optimizer& opt_cpu, Model& gpu, Optimizer& opt_gpu, double tol) {
  kernels::Queue& q = gpu.queue();
  CHECK(opt_gpu.steps_taken() == opt_cpu.steps_taken());
  auto pc = cpu.params(), pg = gpu.params();
  REQUIRE(pc.size() == pg.size());
  for (std::size_t k = 0; k < pc.size(); ++k) {
    INFO("parameter " << pc[k].path);
    CHECK(pg[k].path == pc[k].path);
    CHECK(pg[k].value->device().is_cuda());
    CHECK(rel_error(host_values(*pg[k].value, q), values(*pc[k].value)) < tol);
  }
  auto sc = opt_cpu.state(), sg = opt_gpu.state();
  REQUIRE(sc.size() == sg.size());
  for (auto& [path, slots] : sc)
    for (auto& [slot, tensor] : slots) {
      INFO("optimizer slot " << path << "/" << slot);
      Tensor* dev = sg.at(path).at(slot);
      CHECK(dev->device().is_cuda());
      CHECK(rel_error(host_values(*dev, q), values(*tensor)) < tol);
    }
}

// The arena's padding (between entries, and after the last) is zero and stays zero under
// every update on the device.
void check_padding_zero(Model& m, Tensor& block) {
  const std::vector<float> v = host_values(block, m.queue());
  std::vector<bool> used(v.size(), false);
  for (const ArenaEntry& e : m.arena().param_entries())
    for (std::int64_t i = e.offset; i < e.offset + e.numel; ++i) used[static_cast<std::size_t>(i)] = true;
  std::size_t nonzero = 0;
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!used[i] && v[i] != 0.0f) ++nonzero;
  CHECK(nonzero == 0);
}

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
      gpu.to_device(Device::cuda(0));
      REQUIRE(gpu.arena().values().device() == Device::cuda(0));
      REQUIRE(gpu.arena().grads().device() == Device::cuda(0));
      auto opt_cpu = make_optimizer(c.opt, cpu);
      auto opt_gpu = make_optimizer(c.opt, gpu);

      for (int step = 0; step < 4; ++step) {
        INFO("step " << step);
        const Batch b = make_batch(seed + 10 + static_cast<std::uint64_t>(step) * 3);
        const auto want = train_step(cpu, *opt_cpu, c.opt.lr, b);
        const auto got = train_step(gpu, *opt_gpu, c.opt.lr, b);
        CHECK(got.rows == want.rows);
        CHECK(got.loss == Approx(want.loss).epsilon(c.tol));
        CHECK(got.ce == Approx(want.ce).epsilon(c.tol));
        CHECK(got.distill == Approx(want.distill).epsilon(c.tol));
      }
      check_state(cpu, *opt_cpu, gpu, *opt_gpu, c.tol);
      INFO("arena padding");
      check_padding_zero(gpu, gpu.arena().values());
      check_padding_zero(gpu, gpu.arena().grads());
    }
  }
}

TEST_CASE("an optimizer made before its model moved follows it onto CUDA, slots and all", "[cuda][optim]") {
  if (test::skip_without_cuda()) return;
  OptimizerConfig sgd;
  sgd.kind = "sgd";
  sgd.lr = 0.05;
  sgd.momentum = 0.9;
  OptimizerConfig adamw;
  adamw.kind = "adamw";
  adamw.lr = 1e-3;
  adamw.weight_decay = 0.01;
  for (const auto& [oc, tol] : {std::pair{sgd, 2e-4}, std::pair{adamw, 1e-3}}) {
    const auto seed = test::fresh_seed();
    INFO(oc.kind << ", seed " << seed);
    Rng r1(seed), r2(seed);
    Model cpu = build_model(small_model("mlp"), r1), moved = build_model(small_model("mlp"), r2);
    auto opt_cpu = make_optimizer(oc, cpu);
    auto opt_moved = make_optimizer(oc, moved);
    // Two steps on the CPU (the slots are made there), then the model moves and trains on.
    for (int step = 0; step < 5; ++step) {
      INFO("step " << step);
      if (step == 2) {
        for (auto& [path, slots] : opt_moved->state())
          for (auto& [slot, t] : slots) CHECK(t->device().is_cpu());
        moved.to_device(Device::cuda(0));
      }
      const Batch b = make_batch(seed + 10 + static_cast<std::uint64_t>(step) * 3);
      const auto want = train_step(cpu, *opt_cpu, oc.lr, b);
      const auto got = train_step(moved, *opt_moved, oc.lr, b);
      CHECK(got.loss == Approx(want.loss).epsilon(tol));
    }
    CHECK(moved.device() == Device::cuda(0));
    check_state(cpu, *opt_cpu, moved, *opt_moved, tol);
  }
}

// The gpt kind (token and position embeddings, causal attention, LayerNorm, GELU, tied or
// untied head): int32 token windows, the loss over every position against a teacher's
// logits, SGD with momentum; the same comparison as above. Not AdamW here: the keys' bias
// has a gradient of exactly zero in exact arithmetic (a shift of every key by the same
// vector moves a query's scores by one constant, which the softmax ignores), so each device
// holds rounding noise there, which AdamW normalizes into full-size, device-dependent
// updates (seen on an H100: qkv/bias 1.1e-3 apart after 3 steps). AdamW itself is checked
// above on mlp and cnn.
// Both attention kernels (model.attention): flash on CUDA is its own tile kernels.
TEST_CASE("gpt training steps on CUDA match the CPU, tied and untied head", "[cuda][models][gpt]") {
  if (test::skip_without_cuda()) return;
  constexpr std::int64_t B = 3, T = 8, V = 61;  // odd sizes on purpose
  for (const bool tied : {false, true})
    for (const char* attention : {"materialized", "flash"}) {
      const auto seed = test::fresh_seed();
      INFO((tied ? "tied" : "untied") << ", " << attention << " attention, seed " << seed);
      ModelConfig mc;
      mc.kind = "gpt";
      mc.vocab_size = V, mc.seq_len = T, mc.d_model = 24, mc.heads = 3, mc.blocks = 2;
      mc.tie_embeddings = tied;
      mc.attention = attention;
      OptimizerConfig oc;
      oc.kind = "sgd", oc.lr = 0.05, oc.momentum = 0.9, oc.weight_decay = 1e-4;
      Rng r1(seed), r2(seed);
      Model cpu = build_model(mc, r1), gpu = build_model(mc, r2);
      gpu.to_device(Device::cuda(0));
      auto opt_cpu = make_optimizer(oc, cpu);
      auto opt_gpu = make_optimizer(oc, gpu);
      for (int step = 0; step < 3; ++step) {
        INFO("step " << step);
        const std::uint64_t s = seed + 10 + static_cast<std::uint64_t>(step) * 3;
        Tensor ids = Tensor::empty({B, T}, DType::i32), labels = Tensor::empty({B * T}, DType::i32);
        Rng rng(s);
        for (std::int64_t i = 0; i < B * T; ++i) {
          ids.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng.below(V));
          labels.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng.below(V));
        }
        const Tensor teacher = Tensor::from_vector({B * T, V}, test::random_vector<float>(B * T * V, s + 1, -3, 3));
        kernels::DistillLossResult res[2];
        Model* models[2] = {&cpu, &gpu};
        Optimizer* opts[2] = {opt_cpu.get(), opt_gpu.get()};
        for (int k = 0; k < 2; ++k) {
          kernels::Queue& q = models[k]->queue();
          const Tensor x = on_device(ids, q), y = on_device(labels, q), t = on_device(teacher, q);
          Tensor dlogits = Tensor::empty({B * T, V}, DType::f32, q.device());
          models[k]->zero_grad();
          const Tensor logits = models[k]->forward(x, true);
          res[k] = q.backend().distill_loss(logits, {&t}, y, &dlogits, loss_params(), q);
          models[k]->backward(dlogits);
          opts[k]->step(oc.lr);
          models[k]->synchronize();
        }
        CHECK(res[1].loss == Approx(res[0].loss).epsilon(1e-4));
        CHECK(res[1].distill == Approx(res[0].distill).epsilon(1e-4));
      }
      check_state(cpu, *opt_cpu, gpu, *opt_gpu, 2e-4);
    }
}
