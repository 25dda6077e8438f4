// Model: what its blocks (Module::mark_block) keep of their buffers: activation
// recomputation in training (train.recompute) and forwards without gradients that keep one
// block's working set (set_release_in_eval; Module::releases).
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "codistill/models/model.hpp"
#include "codistill/nn/buffer_pool.hpp"

namespace codistill {

void Model::set_recompute(const std::string& mode) {
  if (mode != "none" && mode != "blocks")
    throw std::invalid_argument("recompute must be one of none, blocks, got '" + mode + "'");
  int blocks = 0;
  visit_modules(*root_, [&](const std::string&, Module& m) {
    if (m.is_block()) ++blocks;
  });
  if (mode == "blocks" && blocks == 0)
    throw std::invalid_argument(
        "recompute: blocks needs a model with blocks (gpt, resnet, or layers with residual blocks); this one has none");
  // One pool for all blocks: block after block takes the buffers the one before let go.
  auto pool = mode == "blocks" ? std::make_shared<nn::BufferPool>() : nullptr;
  visit_modules(*root_, [&](const std::string&, Module& m) {
    if (m.is_block()) m.set_recompute(mode == "blocks", pool);
  });
  recompute_ = mode;
  eval_pool_ = nullptr;  // blocks no longer recomputed take the evaluation pool again
}

int Model::recompute_blocks() {
  int n = 0;
  visit_modules(*root_, [&](const std::string&, Module& m) {
    if (m.recompute()) ++n;
  });
  return n;
}

// A training forward on the CPU: the buffers forwards without gradients left in the thread's
// pool (a block's working set, at their rows) go back before the step's largest phase.
void Model::leave_eval_pool() {
  if (device().is_cpu()) nn::BufferPool::for_this_thread()->use_for(-1);
}

// The shapes of every parameter under each block, in order: equal lists are blocks of one
// shape (a GPT's body); a ResNet's stages differ.
bool Model::uniform_blocks() {
  std::vector<std::vector<kernels::Shape>> blocks;
  visit_modules(*root_, [&](const std::string&, Module& m) {
    if (!m.is_block()) return;
    std::vector<kernels::Shape> shapes;
    visit_modules(m, [&](const std::string&, Module& c) {
      for (const Param& p : c.params()) shapes.push_back(p.value->shape());
    });
    blocks.push_back(std::move(shapes));
  });
  return std::all_of(blocks.begin(), blocks.end(), [&](const auto& b) { return b == blocks.front(); });
}

void Model::set_release_in_eval(bool on) {
  release_chosen_ = true;  // the default (finalize) no longer applies
  apply_release_in_eval(on);
}

void Model::apply_release_in_eval(bool on) {
  visit_modules(*root_, [&](const std::string&, Module& m) { m.set_release_in_eval(on); });
}

// The CPU runs work as it is queued, so a buffer one model let go is free for the next model
// the thread runs: one pool per thread. A device's queues run on their own, so a model there
// reuses only its own buffers, on its own queue, in the order that queue runs them (a new
// queue, after a move, a new pool: the old one's buffers are on the old device).
void Model::use_eval_pool() {
  std::shared_ptr<nn::BufferPool> pool;
  if (device().is_cpu()) {
    pool = nn::BufferPool::for_this_thread();
  } else {
    if (!device_pool_ || pool_queue_ != &queue()) device_pool_ = std::make_shared<nn::BufferPool>();
    pool_queue_ = &queue();
    pool = device_pool_;
  }
  if (pool == eval_pool_) return;
  eval_pool_ = pool;
  visit_modules(*root_, [&](const std::string&, Module& m) {
    if (m.is_block()) m.set_eval_pool(pool);
  });
}

}  // namespace codistill
