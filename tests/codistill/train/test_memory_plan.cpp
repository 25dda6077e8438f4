// The memory plan (codistill/train/memory_plan.hpp): each module's activation buffers and
// the plan's lines against numbers worked out by hand from the layers' do_forward and
// do_backward, for a small MLP and a small GPT; the refusal of a run that will not fit.
#include <catch2/catch.hpp>

#include "codistill/config/config.hpp"
#include "codistill/models/model.hpp"
#include "codistill/nn/layers/linear.hpp"
#include "codistill/train/memory_plan.hpp"
#include "codistill/util/config_error.hpp"
#include "codistill/util/rng.hpp"
#include "support/training_setup.hpp"

using namespace codistill;

namespace {

// input [4] -> fc `hidden` (relu, fused into the Linear on the CPU) -> fc 3.
Model small_mlp(std::int64_t hidden = 8) {
  ModelConfig c;
  c.kind = "mlp";
  c.hidden = {hidden};
  c.input_shape = {4};
  c.classes = 3;
  Rng rng(1);
  return build_model(c, rng);
}

// 1 block, d_model 8, 2 heads, T 4, vocabulary 16, untied head, materialized attention.
Model small_gpt() {
  ModelConfig c = test::tiny_gpt(/*blocks=*/1, /*d=*/8, /*heads=*/2, /*T=*/4, /*V=*/16);
  Rng rng(1);
  return build_model(c, rng);
}

Config config(int batch, int micro_batches, int eval_batch) {
  Config c;
  c.data.batch_size = batch;
  c.train.micro_batches = micro_batches;
  c.train.eval_batch_size = eval_batch;
  c.checkpoint.async = true;
  return c;
}

}  // namespace

TEST_CASE("memory plan: a small MLP's activations, parameters and optimizer state by hand", "[memory]") {
  Model m = small_mlp();
  const auto* fc1 = dynamic_cast<const Linear*>(m.root().children()[1].second.get());
  REQUIRE(fc1);
  REQUIRE(fc1->fused_activation() == kernels::Activation::relu);  // the numbers below assume it

  // Batch 5: flatten none (no backward before fc1); fc1 y 5x8 and, fused relu, dpre 5x8
  // (no dx: the first layer with parameters); relu passes through; fc2 y 5x3, dx 5x8.
  const ActivationBytes a = m.root().plan_activations({5, 4}, /*training=*/true, /*need_dx=*/false);
  CHECK(a.forward == 4 * (5 * 8 + 5 * 3));
  CHECK(a.backward == 4 * (5 * 8 + 5 * 8));
  CHECK(a.output == kernels::Shape{5, 3});
  const ActivationBytes f = m.root().plan_activations({5, 4}, /*training=*/false, false);
  CHECK(f.forward == a.forward);
  CHECK(f.backward == 0);

  Config c = config(10, 2, 7);
  c.optimizer.kind = "adamw";
  MemoryPlanInputs in;
  in.runtime_bytes = 1000;
  in.data_bytes = 2000;
  in.optimizer_slots = 2;
  in.teachers = {nullptr, nullptr, nullptr};  // three of the student's architecture
  const MemoryPlan p = plan_memory(m, c, in);
  // Arena entries are 64-byte aligned: fc1/weight 32 floats, fc1/bias 8 -> 16, fc2/weight
  // 24 -> 32, then fc2/bias 3 (the block ends with the last entry, rounded up to 16).
  const std::int64_t values = 4 * (32 + 16 + 32 + 16);
  CHECK(p.bytes("parameters") == values);
  CHECK(p.bytes("gradients") == values);
  CHECK(p.bytes("optimizer") == 2 * values);
  CHECK(p.bytes("activations") == a.total());  // 10 rows in 2 micro-batches of 5
  // Evaluation at 7 rows: forward 4 * (7*8 + 7*3) beyond training's 4 * (5*8 + 5*3).
  CHECK(p.bytes("evaluation") == 4 * (7 * 11 - 5 * 11));
  // Inputs 5x4 floats and 5 labels per micro-batch, twice, and the loss gradient 5x3.
  CHECK(p.bytes("step_io") == 2 * 4 * (5 * 4 + 5) + 4 * 5 * 3);
  // Each teacher: parameters and forward at max(5, 7) rows.
  CHECK(p.bytes("teachers") == 3 * (values + 4 * 7 * 11));
  CHECK(p.bytes("checkpoint_staging") == 3 * values);
  CHECK(p.bytes("runtime") == 1000);
  CHECK(p.bytes("data") == 2000);
  std::int64_t sum = 0;
  for (const auto& l : p.lines) sum += l.bytes;
  CHECK(p.host_bytes() == sum);
  CHECK(p.device_bytes() == 0);
  CHECK(p.table().find("planned peak") != std::string::npos);
  CHECK(p.to_json().at("host_bytes") == sum);

  // A teacher of another architecture counts as itself: 4 -> 16 -> 3 holds fc1/weight 64
  // floats, fc1/bias 16, fc2/weight 48, fc2/bias 3 -> 16, and a forward at 7 rows of 7x16 + 7x3.
  Model wide = small_mlp(16);
  in.teachers = {&wide};
  const MemoryPlan q = plan_memory(m, c, in);
  CHECK(q.bytes("teachers") == 4 * (64 + 16 + 48 + 16) + 4 * 7 * (16 + 3));
}

TEST_CASE("memory plan: a small GPT's activations by hand, linear in the rows", "[memory]") {
  Model m = small_gpt();
  // B 2, T 4: R = 8 token rows of D = 8 (4 bytes each: 32 per row).
  //   wte y 8x8: 256; wpe y 256 + int32 ids 32;
  //   attn: ln y 256 + mean, invstd 64, dx 256 | qkv y 8x24 768, dx 256 | att 256 |
  //         probs 2x2x4x4 256, scratch 256 | proj y 256, dx 256 | dqkv 768 | residual y 256, dx 256
  //   mlp:  ln 320, dx 256 | fc1 y 8x32 1024 + gelu's pre-activation 1024, dx 256, dpre 1024 |
  //         fc2 y 256, dx 1024 | residual y 256, dx 256
  //   ln_f 320, dx 256; head y 8x16 512, dx 256
  const std::int64_t forward = 256 + 288 + (320 + 768 + 256 + 256 + 256 + 256) + (320 + 2048 + 256 + 256) + 320 + 512;
  const std::int64_t backward = (256 + 256 + 256 + 256 + 768 + 256) + (256 + 1280 + 1024 + 256) + 256 + 256;
  const ActivationBytes a = m.root().plan_activations({2, 4}, true, false);
  CHECK(a.forward == forward);
  CHECK(a.backward == backward);
  CHECK(a.output == kernels::Shape{8, 16});
  const ActivationBytes one = m.root().plan_activations({1, 4}, true, false);
  CHECK(2 * one.total() == a.total());

  Config c = config(2, 1, 2);
  c.data.kind = "text";
  MemoryPlanInputs in;
  in.optimizer_slots = 1;
  const MemoryPlan p = plan_memory(m, c, in);
  CHECK(p.bytes("activations") == forward + backward);
  CHECK(p.bytes("evaluation") == 0);
  // ids [2, 4] and 8 labels (int32), one set; the loss gradient [8, 16].
  CHECK(p.bytes("step_io") == 4 * (8 + 8) + 4 * 8 * 16);
  CHECK(p.bytes("teachers") == 0);

  // The fused head: no head logits [8, 16] (512) or their dx (256); the features' gradient
  // [8, 8] (256) and the loss's chunk of (K + 1) x 8 x 16 logits (K = 2: 1536) instead, and
  // no logits' gradient in the step's inputs.
  c.train.fused_head = true;
  in.teachers = {nullptr, nullptr};
  const MemoryPlan f = plan_memory(m, c, in);
  CHECK(f.bytes("activations") == (forward - 512 + 1536) + (backward - 256 + 256));
  CHECK(f.bytes("step_io") == 4 * (8 + 8));
}

TEST_CASE("memory plan: a run over its limit is a configuration error with the plan and what to change",
          "[memory]") {
  Model m = small_mlp();
  Config c = config(10, 1, 10);
  c.train.memory_limit = "1KiB";
  MemoryPlanInputs in;
  in.optimizer_slots = 1;
  const MemoryPlan p = plan_memory(m, c, in);
  const kernels::Backend& cpu = kernels::backend_for(kernels::Device::cpu());
  const MemoryBudget b = memory_budget(c, cpu, kernels::Device::cpu());
  CHECK(b.host == 1024);
  CHECK(b.device == -1);
  try {
    check_memory_fits(p, b, c);
    FAIL("a plan of " << p.host_bytes() << " bytes passed a 1 KiB limit");
  } catch (const ConfigError& e) {
    CHECK(e.key_path() == "train.memory_limit");
    const std::string what = e.what();
    CHECK(what.find("will not fit") != std::string::npos);
    CHECK(what.find("activations") != std::string::npos);
    CHECK(what.find("data.batch_size (10)") != std::string::npos);
    CHECK(what.find("train.micro_batches") != std::string::npos);
  }
  c.train.memory_limit = "1GiB";
  CHECK_NOTHROW(check_memory_fits(p, memory_budget(c, cpu, kernels::Device::cpu()), c));
  c.train.memory_limit = "off";
  const MemoryBudget off = memory_budget(c, cpu, kernels::Device::cpu());
  CHECK(off.host == -1);
  c.train.memory_limit = "lots";
  CHECK_THROWS_AS(memory_budget(c, cpu, kernels::Device::cpu()), ConfigError);
}

TEST_CASE("memory plan: train.recompute blocks holds the block's input and one block's internals, said so",
          "[memory][recompute]") {
  Model m = small_gpt();
  // The one block of the GPT by hand above, at B 2, T 4: forward attn 2112 + mlp 2880,
  // backward attn 2048 + mlp 2816; its output [8, 8] is 256 bytes.
  const ActivationBytes plain = m.root().plan_activations({2, 4}, true, false);
  Config c = config(2, 1, 2);
  c.data.kind = "text";
  c.train.recompute = "blocks";
  MemoryPlanInputs in;
  in.optimizer_slots = 1;
  in.teachers = {nullptr};  // the student's architecture: a teacher never recomputes
  const MemoryPlan before = plan_memory(m, c, in);
  m.set_recompute("blocks");
  const MemoryPlan p = plan_memory(m, c, in);
  const std::int64_t block_forward = 2112 + 2880, block_backward = 2048 + 2816;
  CHECK(p.bytes("activations") ==
        (plain.forward - block_forward + 256) + (plain.backward - block_backward) + (block_forward + block_backward + 256));
  CHECK(p.bytes("evaluation") == 0);
  CHECK(p.bytes("teachers") == before.bytes("teachers"));
  CHECK(p.to_json().at("recompute") == "blocks");
  CHECK(before.to_json().at("recompute") == "none");
  CHECK(p.table().find("train.recompute: blocks") != std::string::npos);
  CHECK(before.table().find("recompute") == std::string::npos);
  CHECK(m.recompute() == "blocks");  // planning a teacher as the student leaves the student as it was
}

TEST_CASE("memory plan: K teachers hold their forwards and on the host one block's working set between them",
          "[memory][teachers]") {
  Model m = small_gpt();
  Config c = config(2, 1, 2);
  c.data.kind = "text";
  MemoryPlanInputs in;
  in.optimizer_slots = 1;
  // Teachers of the student's architecture at B 2, T 4: 8 rows of 8. The block keeps only
  // its output [8, 8] until the next one, and its internals while it runs (Module::plan).
  Module& block = *m.root().children()[2].second;
  REQUIRE(block.is_block());
  const std::int64_t internals = block.plan_activations({8, 8}, false, false).total() + 8 * 8 * 4;
  const ActivationBytes f = m.root().plan_activations({2, 4}, false, false);
  CHECK(f.transient == internals);
  const auto values = static_cast<std::int64_t>(m.arena().values().nbytes());
  const std::int64_t one = values + f.forward + f.workspace_bytes();
  in.teachers = {nullptr};
  CHECK(plan_memory(m, c, in).bytes("teachers") == one + internals);
  in.teachers = {nullptr, nullptr, nullptr};
  const MemoryPlan host = plan_memory(m, c, in);
  CHECK(host.bytes("teachers") == 3 * one + internals);  // one pool, the thread's
  CHECK(host.table().find("working set shared") != std::string::npos);
  in.device_is_host = false;
  in.device = "cuda:0";
  CHECK(plan_memory(m, c, in).bytes("teachers") == 3 * (one + internals));  // each its own queue's
  // Keeping every buffer (as before forwards released them) plans every block's forward.
  in.device_is_host = true;
  m.set_release_in_eval(false);
  const ActivationBytes kept = m.root().plan_activations({2, 4}, false, false);
  CHECK(kept.transient == 0);
  CHECK(plan_memory(m, c, in).bytes("teachers") == 3 * (values + kept.forward + kept.workspace_bytes()));
}
