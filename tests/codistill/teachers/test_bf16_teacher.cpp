// Teachers holding their matrices as bf16 (codistill.teacher_weights: bf16; Model::
// to_bf16_weights, ParamArena::to_bf16_matrices): the logits and the fused head's loss agree
// with a float32 teacher's within bf16 precision, the arena holds the matrices at 2 bytes
// per parameter and nothing else beyond the small float32 parameters, the memory plan
// counts that, and the configurations that cannot work are refused naming the key.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "codistill/config/config.hpp"
#include "codistill/models/model.hpp"
#include "codistill/teachers/precision.hpp"
#include "codistill/train/memory_plan.hpp"
#include "codistill/util/config_error.hpp"
#include "codistill/util/rng.hpp"
#include "kernels/backend.hpp"
#include "support/test_util.hpp"
#include "support/training_setup.hpp"

using namespace codistill;
using kernels::DType;
using kernels::Tensor;

namespace {

kernels::QueueOptions teacher_queue(kernels::Compute compute) {
  kernels::QueueOptions o;
  o.compute = compute;
  o.frozen_params = true;  // as TeacherPool makes them
  return o;
}

// The model of `mc` from seed 7 as a forward-only teacher on the CPU: float32 weights with
// `compute` products, or bf16 weights (bf16 products). round_matrices: its rank-2 parameters
// set to the values bf16 holds first (what to_bf16_weights keeps), still float32.
Model teacher(const ModelConfig& mc, bool bf16_weights, kernels::Compute compute, bool round_matrices = false) {
  Rng rng(7);
  Model m = build_model(mc, rng);
  if (round_matrices)
    for (const auto& p : m.params())
      if (p.value->ndim() == 2)
        for (std::int64_t i = 0; i < p.value->numel(); ++i) {
          float& v = p.value->data<float>()[i];
          v = kernels::bf16_to_float(kernels::bf16_round(v));
        }
  if (bf16_weights) m.to_bf16_weights();
  else m.drop_grads();
  m.to_device(kernels::Device::cpu(), teacher_queue(compute));
  return m;
}

Tensor token_ids(std::int64_t batch, std::int64_t T, std::int64_t vocab) {
  Tensor ids = Tensor::empty({batch, T}, DType::i32);
  for (std::int64_t i = 0; i < ids.numel(); ++i) ids.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 37 + 11) % vocab);
  return ids;
}

std::vector<float> values_of(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

// The elements of the rank-2 parameters (the matrices) and of the others.
std::pair<std::int64_t, std::int64_t> matrix_and_small(Model& m) {
  std::int64_t matrices = 0, small = 0;
  for (const auto& e : m.arena().param_entries()) (e.shape.size() == 2 ? matrices : small) += e.numel;
  return {matrices, small};
}

}  // namespace

TEST_CASE("bf16 teacher: logits match a float32 teacher's within bf16 precision, tied head or not", "[teachers]") {
  for (bool tied : {false, true}) {
    INFO("tied head " << tied);
    ModelConfig mc = test::tiny_gpt(/*blocks=*/2, /*d=*/32, /*heads=*/2, /*T=*/16, /*V=*/64);
    mc.tie_embeddings = tied;
    Model f32 = teacher(mc, false, kernels::Compute::f32);
    // float32 weights already on bf16 values, bf16 products: the same operands as bf16 weights.
    Model rounded = teacher(mc, false, kernels::Compute::bf16, /*round_matrices=*/true);
    Model bf16 = teacher(mc, true, kernels::Compute::bf16);
    const Tensor ids = token_ids(3, 16, 64);
    const auto want = values_of(f32.forward(ids, false));
    const auto same_operands = values_of(rounded.forward(ids, false));
    const auto got = values_of(bf16.forward(ids, false));
    bf16.synchronize();
    // bf16 operands carry 8 bits: logits of O(1) are off by ~1e-2 of their scale.
    CHECK(test::rel_error(got, want) < 3e-2);
    CHECK(test::rel_error(got, want) > 0);  // the products really were bf16
    // The same operands as the float32 teacher on bf16 values (packed once there, read in
    // place here): only float32 summation order apart, which now and then moves an
    // activation across a bf16 rounding boundary before the next product (a bf16 ulp, 4e-3,
    // of one term): far closer than to float32 products.
    CHECK(test::rel_error(got, same_operands) < 2e-3);
  }
}

TEST_CASE("bf16 teacher: the fused head reads the teacher's bf16 head weight", "[teachers]") {
  ModelConfig mc = test::tiny_gpt(1, 32, 2, 16, 64);
  mc.tie_embeddings = true;  // the head's weight is the embedding table (bf16 here)
  Rng rng(3);
  Model student = build_model(mc, rng);
  // The teachers' operands alike (float32 weights on bf16 values, and those weights as bf16).
  Model t32 = teacher(mc, false, kernels::Compute::bf16, true), t16 = teacher(mc, true, kernels::Compute::bf16);
  const Tensor ids = token_ids(2, 16, 64);
  Tensor labels = Tensor::empty({32}, DType::i32);
  for (std::int64_t i = 0; i < 32; ++i) labels.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 5) % 64);
  const Tensor hidden = student.forward_features(ids, true).clone();
  kernels::DistillHeadParams p;
  p.loss = test::distill_params();
  p.teacher_compute = kernels::Compute::bf16;
  auto loss_with = [&](Model& t) {
    const Tensor th = t.forward_features(ids, false).clone();
    const auto head = t.linear_head();
    REQUIRE(head);
    const std::vector<kernels::HeadTeacher> ts{{&th, head->weight, head->bias}};
    const auto sh = student.linear_head();
    return student.queue().backend().linear_distill_head(hidden, *sh->weight, sh->bias, ts, labels, nullptr,
                                                         nullptr, nullptr, p, student.queue());
  };
  REQUIRE(t16.linear_head()->weight->dtype() == DType::bf16);
  const auto want = loss_with(t32), got = loss_with(t16);
  CHECK(got.ce == want.ce);  // the student's own term does not see the teacher
  CHECK(got.distill == Approx(want.distill).epsilon(2e-3));  // as the logits above
  CHECK(got.distill > 0);
}

TEST_CASE("bf16 teacher: the arena holds the matrices at 2 bytes, the rest as float32, no gradients", "[teachers]") {
  ModelConfig mc = test::tiny_gpt(2, 32, 2, 16, 64);
  mc.tie_embeddings = true;
  Rng rng(1);
  Model m = build_model(mc, rng);
  const auto [matrices, small] = matrix_and_small(m);
  const std::int64_t planned = m.arena().bf16_matrices_bytes();
  m.to_bf16_weights();
  ParamArena& a = m.arena();
  CHECK_FALSE(a.grads().defined());
  CHECK(a.matrices().dtype() == DType::bf16);
  CHECK(a.values().dtype() == DType::f32);
  // Every matrix of this gpt (32-wide rows) is a multiple of the 16-element alignment: no padding.
  CHECK(static_cast<std::int64_t>(a.matrices().nbytes()) == 2 * matrices);
  CHECK(a.held_bytes() == planned);  // the memory plan's figure is what the arena holds
  // The small parameters at 4 bytes (padded to 16 elements each) are all that is above 2 B/param.
  const std::int64_t entries = static_cast<std::int64_t>(a.param_entries().size());
  CHECK(a.held_bytes() <= 2 * matrices + 4 * small + 4 * 16 * entries);
  CHECK(a.held_bytes() < 3 * m.num_params());
  for (const auto& p : m.params()) CHECK(p.value->dtype() == (p.value->ndim() == 2 ? DType::bf16 : DType::f32));
}

TEST_CASE("bf16 teacher: refused on a float32-compute queue and where the backend lacks the ops", "[teachers]") {
  Rng rng(1);
  Model m = build_model(test::tiny_gpt(1, 32, 2, 16, 64), rng);
  m.to_bf16_weights();
  CHECK_THROWS_WITH(m.to_device(kernels::Device::cpu(), teacher_queue(kernels::Compute::f32)),
                    Catch::Contains("queue computing in bf16"));
  Config c;
  c.codistill.teacher_weights = "bf16";
  c.codistill.teacher_precision = "float32";
  try {
    check_teacher_weights(c, kernels::backend_for(kernels::DeviceKind::cpu));
    FAIL("float32 teacher products with bf16 weights were accepted");
  } catch (const ConfigError& e) {
    CHECK(e.key_path() == "codistill.teacher_weights");
    CHECK_THAT(e.detail(), Catch::Contains("teacher_precision: bf16"));
  }
  c.codistill.teacher_precision = "same";
  c.train.precision = "bf16";
  CHECK_NOTHROW(check_teacher_weights(c, kernels::backend_for(kernels::DeviceKind::cpu)));
  // CUDA has the bf16-weight kernels; the CUDA stub of a build without it has none: exit 2
  // at start there.
  const kernels::Backend& cuda = kernels::backend_for(kernels::DeviceKind::cuda);
  const bool has_ops = cuda.supports(kernels::Op::linear_bf16_weights, DType::f32);
  CHECK(cuda.supports(kernels::Op::embedding_bf16_table, DType::f32) == has_ops);
  CHECK(cuda.supports(kernels::Op::linear_distill_head_bf16_teachers, DType::f32) == has_ops);
  if (has_ops) {
    CHECK_NOTHROW(check_teacher_weights(c, cuda));
    return;
  }
  try {
    check_teacher_weights(c, cuda);
    FAIL("bf16 teacher weights were accepted by a backend without the bf16-weight ops");
  } catch (const ConfigError& e) {
    CHECK(e.key_path() == "codistill.teacher_weights");
    CHECK_THAT(e.detail(), Catch::Contains("no bf16-weight kernels"));
  }
}

TEST_CASE("bf16 teacher: the memory plan counts K teachers at their bf16 bytes", "[teachers][memory]") {
  Rng rng(1);
  // 1 block, d_model 16, T 4, vocabulary 16: every matrix a multiple of 16 elements.
  Model m = build_model(test::tiny_gpt(1, 16, 2, 4, 16), rng);
  const auto [matrices, small] = matrix_and_small(m);
  (void)small;
  Config c;
  c.data.kind = "text";
  c.data.batch_size = 2;
  c.train.eval_batch_size = 2;
  MemoryPlanInputs in;
  in.teachers = {nullptr, nullptr};  // K = 2 of the student's architecture
  const MemoryPlan f32 = plan_memory(m, c, in);
  c.codistill.teacher_weights = "bf16";
  const MemoryPlan bf16 = plan_memory(m, c, in);
  // Each teacher's matrices at 2 bytes instead of 4; all else (small parameters, forward) alike.
  CHECK(f32.bytes("teachers") - bf16.bytes("teachers") == 2 * 2 * matrices);
  CHECK(bf16.bytes("parameters") == f32.bytes("parameters"));  // the student stays float32
}
