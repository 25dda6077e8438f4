// bf16 mixed precision (train.precision, codistill.teacher_precision; kernels/ops.hpp
// Compute::bf16) at the level of training: the same runs from the same start on the same
// batches, once with float32 GEMMs and once with bf16 operands and float32 accumulation,
// must end at the same loss within a stated tolerance, while their parameters do differ (the
// bf16 path really ran). Teachers computing in bf16 must give the distillation loss of
// float32 teachers within a stated tolerance, in the unfused and the fused-head step, and
// teachers holding their matrices as bf16 that of bf16-computing ones.
//
// Tolerances: bf16 rounds each GEMM operand to 8 significant bits (relative 2^-9 = 2e-3 per
// operand), and a product's rounding errors average out over its sum, so one forward's
// logits move by about 1e-3 relative; training then follows a slightly different path. The
// runs below must end with mean losses over their last 10 steps within 2% (+0.005 nats) of
// each other (measured on this machine: gpt 0.02306 vs 0.02305 nats, MLP 1.1511 vs 1.1535,
// 0.2%), and a teacher's distillation term within 0.2% of float32's (measured 5e-5..8e-5).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "codistill/data/sampler.hpp"
#include "codistill/train/step.hpp"
#include "codistill/teachers/teachers.hpp"
#include "codistill/models/model.hpp"
#include "codistill/optim/optimizer.hpp"
#include "codistill/util/rng.hpp"
#include "support/cuda_test.hpp"
#include "support/training_setup.hpp"

using namespace codistill;
using kernels::Compute;
using kernels::DType;
using kernels::Tensor;
using test::flat_params;
using test::max_abs_diff;

namespace {

kernels::QueueOptions compute(Compute c) {
  kernels::QueueOptions o;
  o.compute = c;
  return o;
}

// ---- a tiny gpt on a period-11 token stream (each token determines the next) ----

struct GptRun {
  double first = 0, last = 0;  // mean cross-entropy of the first and the last 10 steps
  std::vector<float> params;
};

GptRun train_gpt(Compute c, bool fused_head, kernels::Device device = kernels::Device::cpu()) {
  const std::int64_t B = 8, T = 16, V = 64, steps = 120;
  Rng rng(5);
  Model m = build_model(test::tiny_gpt(2, 32, 2, T, V), rng);
  m.to_device(device, compute(c));
  OptimizerConfig oc;
  oc.kind = "adamw";
  oc.lr = 3e-3;
  auto opt = make_optimizer(oc, m);
  test::PeriodStream stream(V);
  kernels::Queue& q = m.queue();
  kernels::Backend& be = q.backend();
  Tensor x = Tensor::empty({B, T}, DType::i32), labels = Tensor::empty({B * T}, DType::i32);
  Tensor dz = Tensor::empty({B * T, V}, DType::f32, device);
  GptRun out;
  for (int step = 0; step < steps; ++step) {
    stream.next(x.data<std::int32_t>(), labels.data<std::int32_t>(), B, T);
    const Tensor xd = x.to(device), yd = labels.to(device);
    m.zero_grad();
    kernels::DistillLossResult r;
    if (fused_head) {
      const Tensor f = m.forward_features(xd, true);
      const auto h = *m.linear_head();
      Tensor df = Tensor::empty(f.shape(), DType::f32, device);
      kernels::DistillHeadParams hp;
      hp.workspace_bytes = 40 * V * sizeof(float);  // chunks of 40 rows: several per batch
      r = be.linear_distill_head(f, *h.weight, h.bias, {}, yd, &df, h.weight_grad, h.bias_grad, hp, q);
      m.backward_features(df);
    } else {
      const Tensor z = m.forward(xd, true);
      r = be.distill_loss(z, {}, yd, &dz, {}, q);
      m.backward(dz);
    }
    opt->step(oc.lr);
    if (step < 10) out.first += r.ce / 10;
    if (step >= steps - 10) out.last += r.ce / 10;
  }
  out.params = flat_params(m);
  return out;
}

// ---- an MLP on synthetic data through the real step, optionally with a teacher ----

ModelConfig mlp() { return test::mlp_config({64, 32}, {1, 8, 8}, 10); }

struct MlpRun {
  std::vector<StepResult> steps;
  std::vector<float> params;
};

// As test::make_teacher, the teacher's matrices held as bf16 (codistill.teacher_weights: bf16,
// Model::to_bf16_weights: rounded once on the host, then moved).
void make_bf16_weight_teacher(Teacher& t, std::uint64_t seed, kernels::Device device, Compute c) {
  Rng rng(seed);
  t.model = build_model(mlp(), rng);
  t.model.to_bf16_weights();
  kernels::QueueOptions o = compute(c);
  o.frozen_params = true;
  t.model.to_device(device, o);
}

// `steps` SGD steps of batch 32 from seed 5's start; with a teacher (seed 17's MLP, trained
// for nothing: its predictions are as confident as its init makes them) on `teacher` compute,
// its matrices held as bf16 with bf16_weights.
MlpRun train_mlp(Compute student, int steps, bool with_teacher = false, Compute teacher = Compute::f32,
                 bool fused_head = false, kernels::Device device = kernels::Device::cpu(),
                 bool bf16_weights = false) {
  const data::Splits splits = test::synthetic_splits(1024, 16, 10, {1, 8, 8});
  Rng rng(5);
  Model m = build_model(mlp(), rng);
  m.to_device(device, compute(student));
  OptimizerConfig oc;
  oc.kind = "sgd";
  oc.lr = 0.05;
  auto opt = make_optimizer(oc, m);
  Teacher t;
  std::vector<Teacher*> teachers;
  if (with_teacher) {
    if (bf16_weights) make_bf16_weight_teacher(t, 17, device, teacher);
    else test::make_teacher(t, mlp(), 17, device, compute(teacher));  // its own queue
    teachers.push_back(&t);
  }
  const kernels::DistillLossParams loss = test::distill_params();
  data::SamplerOptions so;
  so.batch_size = 32;
  so.seed = 3;
  data::BatchSampler sampler(splits.train, so);
  TrainStep step(m, splits.train, sampler, 32, loss);
  step.set_fused_head(fused_head);
  step.set_teacher_compute(teacher);
  MlpRun out;
  for (int i = 1; i <= steps; ++i) out.steps.push_back(step.run(i, teachers, *opt, oc.lr));
  out.params = flat_params(m);
  return out;
}

double mean_loss(const std::vector<StepResult>& s, std::size_t from, std::size_t to) {
  double sum = 0;
  for (std::size_t i = from; i < to; ++i) sum += s[i].loss.loss;
  return sum / static_cast<double>(to - from);
}

}  // namespace

TEST_CASE("a tiny gpt trained in bf16 ends at the float32 run's loss", "[train][bf16]") {
  const bool fused = GENERATE(false, true);
  INFO((fused ? "fused head" : "unfused head"));
  const GptRun f32 = train_gpt(Compute::f32, fused), bf16 = train_gpt(Compute::bf16, fused);
  INFO("float32: first " << f32.first << ", last " << f32.last << "; bf16: first " << bf16.first << ", last "
                         << bf16.last);
  CHECK(max_abs_diff(f32.params, bf16.params) > 1e-6);  // the bf16 GEMMs did run
  CHECK(f32.last < 0.3 * f32.first);                    // it learned (the comparison means something)
  CHECK(bf16.first == Approx(f32.first).epsilon(0.01));
  CHECK(std::abs(bf16.last - f32.last) <= 0.02 * f32.last + 0.005);
}

TEST_CASE("an MLP trained in bf16 through the step ends at the float32 run's loss", "[train][bf16]") {
  const MlpRun f32 = train_mlp(Compute::f32, 150), bf16 = train_mlp(Compute::bf16, 150);
  const double f_first = mean_loss(f32.steps, 0, 10), f_last = mean_loss(f32.steps, 140, 150);
  const double b_first = mean_loss(bf16.steps, 0, 10), b_last = mean_loss(bf16.steps, 140, 150);
  INFO("float32: first " << f_first << ", last " << f_last << "; bf16: first " << b_first << ", last " << b_last);
  CHECK(max_abs_diff(f32.params, bf16.params) > 1e-6);
  CHECK(f_last < 0.8 * f_first);
  CHECK(std::abs(b_last - f_last) <= 0.02 * f_last + 0.005);
}

TEST_CASE("bf16 teachers give the distillation loss of float32 teachers", "[train][bf16][teachers]") {
  const bool fused = GENERATE(false, true);
  INFO((fused ? "fused head (the teachers' logits in the head's bf16 GEMMs)" : "unfused (the teacher's own queue)"));
  // The student in float32 both times: only the teacher's arithmetic differs.
  const MlpRun f32 = train_mlp(Compute::f32, 3, true, Compute::f32, fused);
  const MlpRun bf16 = train_mlp(Compute::f32, 3, true, Compute::bf16, fused);
  for (std::size_t i = 0; i < f32.steps.size(); ++i) {
    INFO("step " << i + 1 << ": distill " << f32.steps[i].loss.distill << " (float32 teacher) vs "
                 << bf16.steps[i].loss.distill << " (bf16 teacher)");
    REQUIRE(f32.steps[i].teachers == 1);
    CHECK(f32.steps[i].loss.distill > 0);
    CHECK(bf16.steps[i].loss.distill == Approx(f32.steps[i].loss.distill).epsilon(2e-3));
    CHECK(bf16.steps[i].loss.ce == Approx(f32.steps[i].loss.ce).epsilon(1e-3));
  }
  CHECK(bf16.steps[0].loss.distill != f32.steps[0].loss.distill);  // the bf16 teacher did run
  // Its matrices held as bf16 (codistill.teacher_weights: bf16): the values bf16 products
  // round them to, stored once, so the bf16 teacher's loss up to float32 summation order.
  const MlpRun held = train_mlp(Compute::f32, 3, true, Compute::bf16, fused, kernels::Device::cpu(), true);
  for (std::size_t i = 0; i < held.steps.size(); ++i) {
    INFO("step " << i + 1 << ": distill " << held.steps[i].loss.distill << " (bf16 weights)");
    CHECK(held.steps[i].loss.distill == Approx(bf16.steps[i].loss.distill).epsilon(2e-4));
    CHECK(held.steps[i].loss.distill == Approx(f32.steps[i].loss.distill).epsilon(2e-3));
  }
}

// ---- CUDA (bf16 cublasGemmEx operands, float32 accumulation): the same stated tolerances
// against the CPU's float32 runs ----

TEST_CASE("a tiny gpt trained in bf16 on CUDA ends at the CPU float32 run's loss", "[cuda][train][bf16]") {
  if (test::skip_without_cuda()) return;
  const bool fused = GENERATE(false, true);
  INFO((fused ? "fused head" : "unfused head"));
  const GptRun cpu = train_gpt(Compute::f32, fused), gpu = train_gpt(Compute::bf16, fused, kernels::Device::cuda());
  INFO("CPU float32: first " << cpu.first << ", last " << cpu.last << "; CUDA bf16: first " << gpu.first << ", last "
                             << gpu.last);
  CHECK(max_abs_diff(cpu.params, gpu.params) > 1e-6);
  CHECK(gpu.first == Approx(cpu.first).epsilon(0.01));
  CHECK(std::abs(gpu.last - cpu.last) <= 0.02 * cpu.last + 0.005);
}

TEST_CASE("bf16 teachers on CUDA give the distillation loss of float32 teachers", "[cuda][train][bf16][teachers]") {
  if (test::skip_without_cuda()) return;
  const bool fused = GENERATE(false, true);
  INFO((fused ? "fused head" : "unfused"));
  const auto cuda = kernels::Device::cuda();
  const MlpRun f32 = train_mlp(Compute::f32, 3, true, Compute::f32, fused, cuda);
  const MlpRun bf16 = train_mlp(Compute::f32, 3, true, Compute::bf16, fused, cuda);
  // Its matrices held as bf16 (codistill.teacher_weights: bf16; the bf16-weight kernels).
  const MlpRun held = train_mlp(Compute::f32, 3, true, Compute::bf16, fused, cuda, true);
  for (std::size_t i = 0; i < f32.steps.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(f32.steps[i].loss.distill > 0);
    CHECK(bf16.steps[i].loss.distill == Approx(f32.steps[i].loss.distill).epsilon(2e-3));
    CHECK(held.steps[i].loss.distill == Approx(bf16.steps[i].loss.distill).epsilon(2e-4));
    CHECK(held.steps[i].loss.distill == Approx(f32.steps[i].loss.distill).epsilon(2e-3));
  }
  CHECK(bf16.steps[0].loss.distill != f32.steps[0].loss.distill);
}
