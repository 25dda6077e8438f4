// Activation recomputation (train.recompute: blocks; Model::set_recompute, Module::
// set_recompute): a model whose blocks rerun their forward for their backward gives the
// logits, gradients, dropout streams and batch-norm statistics of the same model without it,
// bit for bit, in float64 and float32, over steps where the second reuses nothing the first
// released; and the modes a model refuses.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "codistill/models/model.hpp"
#include "codistill/util/rng.hpp"
#include "model_test_util.hpp"
#include "support/test_util.hpp"
#include "support/training_setup.hpp"

using namespace codistill;
using kernels::DType;
using kernels::Shape;
using kernels::Tensor;

namespace {

using model_test::same_bits;
using model_test::token_batch;

Tensor image_batch(const Shape& shape, std::uint64_t seed, DType dtype) {
  auto v = test::random_vector<double>(static_cast<std::size_t>(kernels::shape_numel(shape)), seed);
  return Tensor::from_vector(shape, v).to(dtype);
}

// A loss gradient that depends on the logits (so a wrong forward shows): 0.01 * logits.
Tensor logit_gradient(const Tensor& logits) {
  Tensor g = logits.clone();
  kernels::dispatch_floating(g.dtype(), [&]<class T>() {
    for (std::int64_t i = 0; i < g.numel(); ++i) g.data<T>()[i] *= static_cast<T>(0.01);
  });
  return g;
}

// Two models built alike, one recomputing its blocks: each step's logits, gradients, random
// streams and non-trainable buffers must be the same bits.
void check_same_steps(Model& plain, Model& recomputed, const std::vector<Tensor>& inputs) {
  for (std::size_t step = 0; step < inputs.size(); ++step) {
    INFO("step " << step);
    plain.zero_grad();
    recomputed.zero_grad();
    const Tensor a = plain.forward(inputs[step], true).clone();
    const Tensor b = recomputed.forward(inputs[step], true).clone();
    CHECK(same_bits(a, b));
    plain.backward(logit_gradient(a));
    recomputed.backward(logit_gradient(b));
    CHECK(same_bits(plain.arena().grads(), recomputed.arena().grads()));
    if (plain.arena().buffers().defined()) CHECK(same_bits(plain.arena().buffers(), recomputed.arena().buffers()));
    const auto ra = plain.rngs(), rb = recomputed.rngs();
    REQUIRE(ra.size() == rb.size());
    for (std::size_t i = 0; i < ra.size(); ++i) CHECK(ra[i].second->state() == rb[i].second->state());
  }
}

}  // namespace

TEST_CASE("recompute: a gpt with dropout gives the same bits as without, float64 and float32", "[models][recompute]") {
  for (const std::string attention : {"materialized", "flash"})
    for (const DType dtype : {DType::f64, DType::f32}) {
      INFO(attention << " attention, " << kernels::dtype_name(dtype));
      ModelConfig c = test::tiny_gpt(/*blocks=*/3, /*d=*/32, /*heads=*/2, /*T=*/16, /*V=*/64);
      c.dropout = 0.2;
      c.attention = attention;
      Rng r1(5), r2(5);
      Model plain = build_model(c, r1), recomputed = build_model(c, r2);
      recomputed.set_recompute("blocks");
      CHECK(recomputed.recompute_blocks() == 3);
      CHECK(plain.recompute_blocks() == 0);
      plain.to_dtype(dtype);
      recomputed.to_dtype(dtype);
      check_same_steps(plain, recomputed, {token_batch(3, 16, 64, 1), token_batch(3, 16, 64, 2)});
    }
}

TEST_CASE("recompute: a resnet's blocks keep batch-norm statistics and gradients as without", "[models][recompute]") {
  ModelConfig c;
  c.kind = "resnet";
  c.channels = {4, 8};
  c.blocks = 2;
  c.hidden = {};
  c.input_shape = {1, 8, 8};
  c.classes = 5;
  for (const DType dtype : {DType::f64, DType::f32}) {
    INFO(kernels::dtype_name(dtype));
    Rng r1(3), r2(3);
    Model plain = build_model(c, r1), recomputed = build_model(c, r2);
    recomputed.set_recompute("blocks");
    CHECK(recomputed.recompute_blocks() == 4);
    plain.to_dtype(dtype);
    recomputed.to_dtype(dtype);
    check_same_steps(plain, recomputed, {image_batch({4, 1, 8, 8}, 1, dtype), image_batch({4, 1, 8, 8}, 2, dtype)});
    // Evaluation after training: the released buffers come back at another batch.
    const Tensor x = image_batch({3, 1, 8, 8}, 9, dtype);
    CHECK(same_bits(plain.forward(x, false).clone(), recomputed.forward(x, false).clone()));
  }
}

TEST_CASE("recompute: the plan holds the blocks' outputs and one block's internals", "[models][recompute]") {
  ModelConfig c = test::tiny_gpt(/*blocks=*/2, /*d=*/8, /*heads=*/2, /*T=*/4, /*V=*/16);
  Rng rng(1);
  Model m = build_model(c, rng);
  const Shape x{3, 4};
  const ActivationBytes plain = m.root().plan_activations(x, true, false);
  // Each block: [12, 8] rows in and out, its input gradient wanted (the embeddings train).
  Module& h0 = *m.root().children()[2].second;
  REQUIRE(h0.is_block());
  const ActivationBytes block = h0.plan_activations({12, 8}, true, true);
  m.set_recompute("blocks");
  const ActivationBytes rec = m.root().plan_activations(x, true, false);
  const std::int64_t out = 4 * 12 * 8;
  CHECK(rec.forward == plain.forward - 2 * block.forward + 2 * out);
  CHECK(rec.backward == plain.backward - 2 * block.backward);
  CHECK(rec.transient == block.total() + out);  // the rerun block beside the gradient handed to it
  CHECK(rec.total() < plain.total());
  m.set_recompute("none");
  CHECK(m.root().plan_activations(x, true, false).total() == plain.total());
}

TEST_CASE("recompute: unknown modes and models without blocks are refused", "[models][recompute]") {
  Rng rng(1);
  Model gpt = build_model(test::tiny_gpt(), rng);
  CHECK_THROWS_WITH(gpt.set_recompute("layers"), Catch::Contains("none, blocks"));
  ModelConfig mlp;
  mlp.kind = "mlp";
  mlp.hidden = {8};
  mlp.input_shape = {4};
  mlp.classes = 3;
  Model m = build_model(mlp, rng);
  CHECK_THROWS_WITH(m.set_recompute("blocks"), Catch::Contains("has none"));
  CHECK_NOTHROW(m.set_recompute("none"));
  CHECK(m.recompute() == "none");
}
