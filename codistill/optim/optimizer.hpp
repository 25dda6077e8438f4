#pragma once
// Optimizers over a model's parameter arena: one update op over the whole flat block of
// values and gradients per step (one loop on the CPU, one launch on CUDA), on the model's
// queue, so it is ordered after the backward pass that wrote the gradients. State slots are
// flat blocks laid out like the arena and named ("momentum", "adam_m", "adam_v") per
// parameter so that checkpoints save them as /optimizer/<path>/<slot>.
#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "codistill/optim/optimizer_options.hpp"
#include "codistill/nn/trainable.hpp"

namespace codistill {

// The blocks an update reads and writes: the arena's values and the optimizer's slot blocks
// by name (tensors sharing the memory, not copies).
struct OptimizerBlocks {
  kernels::Tensor values;
  std::map<std::string, kernels::Tensor> slots;
};

class Optimizer {
 public:
  explicit Optimizer(Trainable& model) : model_(&model) {}
  virtual ~Optimizer() = default;
  virtual std::string kind() const = 0;
  // One update of every parameter with its grad, at learning rate lr.
  void step(double lr) { update(lr, nullptr); }
  // The same update out of place: it reads the live blocks and writes `into` (blocks_like()),
  // which become the model's values (ParamArena::replace_values) and this optimizer's slots;
  // the blocks it read, the state before this step, come back unchanged. Same bits as
  // step(). What an asynchronous checkpoint does instead of copying the state
  // (persist/checkpointing.hpp): on the CPU, for large blocks, about the memory traffic of
  // an update in place (kernels::UpdateSource).
  // Throws std::invalid_argument when `into` is not laid out like the live blocks or shares
  // memory with them, and then changes nothing (as when the update itself throws).
  OptimizerBlocks step_into(double lr, OptimizerBlocks into);
  // The live blocks (slots created first), and new uninitialized ones laid out like them.
  OptimizerBlocks live_blocks();
  OptimizerBlocks blocks_like();
  // Gradient clipping by global norm (optimizer.clip_grad_norm, as torch.nn.utils.
  // clip_grad_norm_): each update reads the gradients scaled by min(1, max_norm / (norm +
  // 1e-6)), norm the L2 norm of all of them; 0 turns it off. Throws std::invalid_argument
  // for a negative or non-finite max_norm.
  void set_clip_grad_norm(double max_norm);
  // optimizer.decay: "all" (every parameter decays) or "matrices" (only parameters of 2 or
  // more dimensions). Anything else throws std::invalid_argument listing the valid values.
  void set_decay_filter(const std::string& which);
  // The gradients' global norm before clipping at the last update; nullopt without clipping.
  std::optional<double> last_grad_norm() const { return last_grad_norm_; }
  std::int64_t steps_taken() const { return t_; }
  // How many state blocks laid out like the parameters this optimizer keeps (its slots),
  // for the memory plan; known before the first step creates them.
  std::size_t slot_count() const { return slot_names().size(); }
  void set_steps_taken(std::int64_t t) { t_ = t; }
  // Slot tensors (views into the slot blocks) by parameter path then slot name, for
  // checkpoints; the blocks are created on first use, zero, where the parameters are.
  std::map<std::string, std::map<std::string, kernels::Tensor*>> state();

 protected:
  // The update: writes the arena's values and the slot blocks, reading `from`'s blocks
  // instead where it is set (null: in place).
  virtual void update(double lr, const OptimizerBlocks* from) = 0;
  // The slot names this optimizer keeps (none for plain SGD).
  virtual std::vector<std::string> slot_names() const = 0;
  // The flat slot block `name`, created or moved to follow the arena's dtype and device.
  kernels::Tensor& slot(const std::string& name);
  // The factor the update applies to the gradients (kernels::SgdScalars::grad_scale): 1
  // without clipping; with it, measures the norm (one pass over the gradients, waiting for
  // the queue) and records it.
  double clip_scale();
  // Elements [begin, end) of the arena's blocks, all decaying or all not (optimizer.decay):
  // one run over everything with "all"; with "matrices", the runs of consecutive parameters
  // of the same kind (padding goes with the parameter before it: it stays zero either way).
  struct DecayRun {
    std::int64_t begin = 0, end = 0;
    bool decay = true;
  };
  std::vector<DecayRun> decay_runs();
  // The run's part of a block laid out like the arena (a value, gradient or slot block).
  static kernels::Tensor part(const kernels::Tensor& block, const DecayRun& r);

  Trainable* model_;
  std::int64_t t_ = 0;

 private:
  std::map<std::string, kernels::Tensor> slots_;
  std::map<std::string, std::map<std::string, kernels::Tensor>> views_;
  const void* views_of_ = nullptr;  // the slot memory the views were made for
  double clip_grad_norm_ = 0;
  bool decay_matrices_only_ = false;
  std::optional<double> last_grad_norm_;
};

// sgd (momentum, nesterov, L2 weight decay as in PyTorch SGD) | adamw (decoupled weight
// decay as in PyTorch AdamW). Unknown kinds throw listing the valid ones.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg, Trainable& model);
std::vector<std::string> optimizer_kinds();  // sorted: adamw, sgd

// Learning rate at step (0-based): linear warm-up over warmup_steps, then (counting steps
// from the end of the warm-up) constant | step | exponential | cosine | cyclical | sgdr:
//   step         lr * gamma^floor(t / step_size)
//   exponential  max(min_lr, lr * gamma^(t / step_size))
//   cosine       from lr to min_lr over total_steps - warmup_steps (min_lr at step
//                total_steps; its last training step is one short of it)
//   cyclical     Smith's triangle wave between min_lr and lr, half_cycle_steps each way,
//                the height halved every cycle with cycle_mode triangular2
//   sgdr         cosine periods from lr towards min_lr of restart_steps * restart_mult^i
//                steps, each restarting at lr (Loshchilov & Hutter)
// (docs/config.md has the formulas). Unknown kinds throw listing the valid ones; a key out
// of range throws naming it (the config loader rejects both before a run starts).
double learning_rate(const OptimizerConfig& cfg, std::int64_t step, std::int64_t total_steps);
std::vector<std::string> schedule_kinds();  // sorted: constant, cosine, cyclical, exponential, sgdr, step

}  // namespace codistill
