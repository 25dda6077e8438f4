// TrainStep with gradient accumulation (train.micro_batches): K micro-batches of B/K rows
// give the step that one batch of B rows gives, for SGD and AdamW, with and without a
// teacher, with dropout; on CUDA too (where teachers run on their own queues, so the
// event that keeps a teacher's next forward from overwriting logits a loss still reads
// matters).
//
// Not bit for bit: a gradient is a sum over rows, and K partial GEMM sums added into the
// gradient block round differently from one GEMM over all rows (OpenBLAS also blocks the
// row dimension differently for 6 rows than for 24). The difference is float32 rounding of
// sums of ~24 terms: measured 1.5e-8 .. 4.5e-8 (one to three float ulps) on the parameters
// after three updates of ~0.02-0.03; kTol leaves room for other BLAS kernels (AVX-512 vs
// AVX2 blocking). The losses agree to ~1e-8 relative. The test would fail on a wrong weighting
// by a wide margin: a micro-batch weighted 1 instead of 1/K makes the update K times larger,
// and the updates are checked to be far larger than kTol.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "codistill/data/sampler.hpp"
#include "codistill/train/step.hpp"
#include "codistill/teachers/teachers.hpp"
#include "codistill/models/model.hpp"
#include "codistill/nn/layers/activation.hpp"
#include "codistill/nn/layers/flatten.hpp"
#include "codistill/nn/layers/linear.hpp"
#include "codistill/optim/optimizer.hpp"
#include "codistill/util/rng.hpp"
#include "support/cuda_test.hpp"
#include "support/training_setup.hpp"

using namespace codistill;
using test::max_abs_diff;

namespace {

constexpr std::int64_t kBatch = 24;
constexpr double kTol = 1e-6;

struct Setup {
  std::string optimizer = "sgd";
  bool teacher = false;
  double dropout = 0.0;
};

struct Outcome {
  std::vector<float> initial, params;
  std::vector<StepResult> steps;
};

ModelConfig mlp(double dropout) { return test::mlp_config({32, 16}, {1, 4, 4}, 5, dropout); }

// The synthetic data of these tests: 5 classes of [1, 4, 4] images.
data::Splits splits_of(std::int64_t train, std::int64_t test) {
  return test::synthetic_splits(train, test, 5, {1, 4, 4});
}

// Three steps from the same start, on the same batches, in `micro_batches` parts.
Outcome train(const Setup& s, std::int64_t micro_batches, kernels::Device device = kernels::Device::cpu(),
              bool fused_head = false) {
  const data::Splits splits = splits_of(256, 16);

  Rng rng(5);
  Model student = build_model(mlp(s.dropout), rng);
  student.to_device(device);
  OptimizerConfig oc;
  oc.kind = s.optimizer;
  oc.lr = s.optimizer == "sgd" ? 0.1 : 0.01;
  oc.weight_decay = 0.01;
  auto optimizer = make_optimizer(oc, student);

  Teacher teacher;
  std::vector<Teacher*> teachers;
  if (s.teacher) {
    test::make_teacher(teacher, mlp(0.0), 17, device);  // its own queue on CUDA
    teachers.push_back(&teacher);
  }
  const kernels::DistillLossParams loss = test::distill_params();

  data::SamplerOptions so;
  so.batch_size = kBatch;
  so.seed = 3;
  data::BatchSampler sampler(splits.train, so);
  TrainStep step(student, splits.train, sampler, kBatch, loss, micro_batches);
  step.set_fused_head(fused_head);

  Outcome out;
  out.initial = test::flat_params(student);
  for (int i = 1; i <= 3; ++i) out.steps.push_back(step.run(i, teachers, *optimizer, oc.lr));
  out.params = test::flat_params(student);
  return out;
}

}  // namespace

TEST_CASE("micro-batches give the step of the whole batch", "[train][step]") {
  for (const char* optimizer : {"sgd", "adamw"}) {
    for (bool teacher : {false, true}) {
      for (double dropout : {0.0, 0.25}) {
        const Setup s{optimizer, teacher, dropout};
        DYNAMIC_SECTION(optimizer << (teacher ? " with a teacher" : " without teachers") << ", dropout "
                                  << dropout) {
          const Outcome whole = train(s, 1);
          // The updates are far above the tolerance, so a mis-weighted micro-batch shows.
          REQUIRE(max_abs_diff(whole.initial, whole.params) > 100 * kTol);
          for (std::int64_t k : {std::int64_t{2}, std::int64_t{4}, kBatch}) {  // kBatch: one row per micro-batch
            INFO("micro_batches " << k);
            const Outcome parts = train(s, k);
            CHECK(parts.initial == whole.initial);
            CHECK(max_abs_diff(parts.params, whole.params) <= kTol);
            for (std::size_t i = 0; i < whole.steps.size(); ++i) {
              INFO("step " << i + 1);
              const auto& a = whole.steps[i];
              const auto& b = parts.steps[i];
              CHECK(b.loss.rows == kBatch);
              CHECK(b.teachers == a.teachers);
              CHECK(b.loss.loss == Approx(a.loss.loss).epsilon(1e-6));
              CHECK(b.loss.ce == Approx(a.loss.ce).epsilon(1e-6));
              // The KL term is a small difference of float logs: its error is absolute
              // (~1e-8 measured), not relative to its size.
              CHECK(b.loss.distill == Approx(a.loss.distill).epsilon(1e-6).margin(1e-7));
              if (teacher) CHECK(a.loss.distill > 0);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("micro-batches must divide the batch", "[train][step]") {
  const data::Splits splits = splits_of(64, 8);
  Rng rng(5);
  Model m = build_model(mlp(0.0), rng);
  data::SamplerOptions so;
  so.batch_size = 24;
  data::BatchSampler sampler(splits.train, so);
  CHECK_THROWS_AS(TrainStep(m, splits.train, sampler, 24, {}, 5), std::invalid_argument);
  CHECK_THROWS_AS(TrainStep(m, splits.train, sampler, 24, {}, 0), std::invalid_argument);
  CHECK_NOTHROW(TrainStep(m, splits.train, sampler, 24, {}, 3));
}

TEST_CASE("micro-batches give the step of the whole batch on CUDA", "[cuda][train][step]") {
  if (test::skip_without_cuda()) return;
  for (const char* optimizer : {"sgd", "adamw"}) {
    const Setup s{optimizer, /*teacher=*/true, /*dropout=*/0.25};
    DYNAMIC_SECTION(optimizer) {
      const Outcome whole = train(s, 1, kernels::Device::cuda());
      REQUIRE(max_abs_diff(whole.initial, whole.params) > 100 * kTol);
      for (std::int64_t k : {std::int64_t{4}, kBatch}) {
        INFO("micro_batches " << k);
        const Outcome parts = train(s, k, kernels::Device::cuda());
        CHECK(max_abs_diff(parts.params, whole.params) <= kTol);
        for (std::size_t i = 0; i < whole.steps.size(); ++i) {
          CHECK(parts.steps[i].loss.loss == Approx(whole.steps[i].loss.loss).epsilon(1e-6));
          CHECK(parts.steps[i].loss.distill == Approx(whole.steps[i].loss.distill).epsilon(1e-6).margin(1e-7));
        }
      }
    }
  }
}

TEST_CASE("the fused head step is the unfused step up to float rounding", "[train][step][fused_head]") {
  // The mlp ends in a Linear with a bias (fc3): the head op applies it, its gradients
  // included, for the student and the teacher.
  for (bool teacher : {false, true})
    for (std::int64_t micro : {1, 2}) {
      INFO("teacher " << teacher << ", micro-batches " << micro);
      Setup s;
      s.teacher = teacher;
      s.optimizer = "adamw";
      const Outcome plain = train(s, micro), fused = train(s, micro, kernels::Device::cpu(), /*fused_head=*/true);
      REQUIRE(plain.steps.size() == fused.steps.size());
      for (std::size_t i = 0; i < plain.steps.size(); ++i) {
        CHECK(fused.steps[i].loss.loss == Approx(plain.steps[i].loss.loss).epsilon(1e-5));
        CHECK(fused.steps[i].loss.distill == Approx(plain.steps[i].loss.distill).epsilon(1e-5).margin(1e-7));
        CHECK(fused.steps[i].loss.rows == plain.steps[i].loss.rows);
      }
      CHECK(max_abs_diff(plain.initial, fused.initial) == 0.0);
      CHECK(max_abs_diff(plain.params, plain.initial) > 1e-3);  // the steps did train
      CHECK(max_abs_diff(plain.params, fused.params) < 1e-5);
    }
}

TEST_CASE("a model without a linear head refuses the fused head step", "[train][step][fused_head]") {
  Model m;
  m.add("flatten", std::make_unique<Flatten>());
  m.add("fc", std::make_unique<Linear>(16, 5));
  m.add("act", std::make_unique<ReLU>());
  m.set_input_shape({1, 4, 4});
  m.finalize();
  const data::Splits splits = splits_of(64, 8);
  data::SamplerOptions so;
  so.batch_size = 8;
  data::BatchSampler sampler(splits.train, so);
  TrainStep step(m, splits.train, sampler, 8, {}, 1);
  CHECK_THROWS_WITH(step.set_fused_head(true), Catch::Contains("does not end in a linear layer"));
  CHECK_FALSE(step.fused_head());
}
