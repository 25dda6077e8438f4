// Forwards without gradients (teachers, evaluation; Module::set_release_in_eval, Model::
// set_release_in_eval): a block keeps only its output, its internals going to a pool, and the
// logits, features and the distillation loss are the bits of the same models keeping every
// buffer; K models run one after another on one thread share one block's working set; a
// training step after an evaluation forward is unchanged.
#include <catch2/catch.hpp>

#include <cstring>
#include <thread>
#include <vector>

#include "codistill/models/model.hpp"
#include "codistill/nn/buffer_pool.hpp"
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

Model gpt(std::uint64_t seed, bool release) {
  ModelConfig c = test::tiny_gpt(/*blocks=*/3, /*d=*/32, /*heads=*/2, /*T=*/16, /*V=*/64);
  Rng rng(seed);
  Model m = build_model(c, rng);
  m.set_release_in_eval(release);
  return m;
}

// Runs fn on a thread of its own: its pool (the CPU's, one per thread) starts empty.
template <class F>
void on_fresh_thread(F&& fn) {
  std::thread t(std::forward<F>(fn));
  t.join();
}

}  // namespace

TEST_CASE("eval release: logits and features are the same bits as keeping every buffer", "[models][release]") {
  for (const std::string attention : {"materialized", "flash"}) {
    INFO(attention << " attention");
    ModelConfig c = test::tiny_gpt(3, 32, 2, 16, 64);
    c.attention = attention;
    c.dropout = 0.1;  // inactive in evaluation, as a teacher's
    Rng r1(5), r2(5);
    Model kept = build_model(c, r1), released = build_model(c, r2);
    kept.set_release_in_eval(false);
    // Twice each: the second forward takes its buffers from the pool the first filled.
    for (std::uint64_t seed : {1, 2}) {
      const Tensor x = token_batch(2, 16, 64, seed);
      CHECK(same_bits(kept.forward(x, false).clone(), released.forward(x, false).clone()));
      CHECK(same_bits(kept.forward_features(x, false).clone(), released.forward_features(x, false).clone()));
    }
  }
}

TEST_CASE("eval release: a training step after an evaluation forward is unchanged", "[models][release]") {
  Model kept = gpt(3, false), released = gpt(3, true);
  const Tensor train = token_batch(2, 16, 64, 4), eval = token_batch(3, 16, 64, 5);
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    CHECK(same_bits(kept.forward(eval, false).clone(), released.forward(eval, false).clone()));
    kept.zero_grad();
    released.zero_grad();
    const Tensor a = kept.forward(train, true).clone(), b = released.forward(train, true).clone();
    CHECK(same_bits(a, b));
    kept.backward(a);
    released.backward(b);
    CHECK(same_bits(kept.arena().grads(), released.arena().grads()));
  }
}

TEST_CASE("eval release: K teachers on one thread share one block's buffers, the loss the same bits",
          "[models][release]") {
  on_fresh_thread([] {
    Model k1 = gpt(7, false), k2 = gpt(8, false), t1 = gpt(7, true), t2 = gpt(8, true);
    const Tensor x = token_batch(2, 16, 64, 6);
    const Tensor b1 = k1.forward(x, false).clone(), b2 = k2.forward(x, false).clone();
    const auto pool = nn::BufferPool::for_this_thread();
    CHECK(pool->free_bytes() == 0);  // models keeping their buffers give none back
    const Tensor a1 = t1.forward(x, false).clone();
    const std::size_t one = pool->free_bytes();
    // The block's internals (32-wide rows and more, 32 rows) are back, not all three blocks'.
    const ActivationBytes block = t1.root().children()[2].second->plan_activations({32, 32}, false, false);
    CHECK(one > 0);
    CHECK(static_cast<std::int64_t>(one) <= block.total());
    const Tensor a2 = t2.forward(x, false).clone();
    CHECK(pool->free_bytes() == one);  // the second teacher took the first one's and gave them back
    CHECK(same_bits(a1, b1));
    CHECK(same_bits(a2, b2));

    Model student = gpt(9, true);
    const Tensor z = student.forward(x, true).clone();
    Tensor labels = Tensor::empty({32}, DType::i32);
    for (std::int64_t i = 0; i < 32; ++i) labels.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 5) % 64);
    kernels::Queue& q = kernels::default_cpu_queue();
    Tensor ga = Tensor::empty(z.shape(), DType::f32), gb = Tensor::empty(z.shape(), DType::f32);
    const auto la = q.backend().distill_loss(z, {&a1, &a2}, labels, &ga, test::distill_params(), q);
    const auto lb = q.backend().distill_loss(z, {&b1, &b2}, labels, &gb, test::distill_params(), q);
    CHECK(la.loss == lb.loss);
    CHECK(la.distill == lb.distill);
    CHECK(same_bits(ga, gb));
  });
}

TEST_CASE("eval release: the plan holds no block's output and one block's internals with its input",
          "[models][release]") {
  Model m = gpt(1, true);
  const Shape x{2, 16};
  Module& h0 = *m.root().children()[2].second;
  REQUIRE(h0.is_block());
  const ActivationBytes block = h0.plan_activations({32, 32}, false, false);
  const ActivationBytes released = h0.plan({32, 32}, false, false);
  CHECK(released.forward == 0);
  CHECK(released.transient == block.total() + 32 * 32 * 4);
  CHECK(released.output == block.output);
  // Training keeps everything; with the release off, evaluation does too.
  CHECK(h0.plan({32, 32}, true, true).total() == h0.plan_activations({32, 32}, true, true).total());
  m.set_release_in_eval(false);
  CHECK(h0.plan({32, 32}, false, false).forward == block.forward);
  // The model: three blocks' forwards become the largest one's (all alike) with its input.
  const ActivationBytes kept = m.root().plan_activations(x, false, false);
  m.set_release_in_eval(true);
  const ActivationBytes r = m.root().plan_activations(x, false, false);
  CHECK(r.forward == kept.forward - 3 * block.forward);
  CHECK(r.transient == block.total() + 32 * 32 * 4);
}
