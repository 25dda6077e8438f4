#pragma once
// Optimizers over a model's named parameters. State slots are named ("momentum",
// "adam_m", "adam_v") so that checkpoints can save them as /optimizer/<path>/<slot>.
// Parameters on CUDA are updated by one kernel launch per step over all of them
// (kernels/cuda/optimizer.hpp) on the model's stream, with the scalars computed on the
// host exactly as the CPU path does; slots then live on the device too.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codistill/config/config.hpp"
#include "codistill/models/model.hpp"
#include "kernels/cuda/context.hpp"

namespace codistill {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string kind() const = 0;
  // One update of every parameter with its grad, at learning rate lr.
  virtual void step(double lr) = 0;
  std::int64_t steps_taken() const { return t_; }
  void set_steps_taken(std::int64_t t) { t_ = t; }
  // Slot tensors by parameter path then slot name (for checkpoints), created lazily on the
  // parameters' device.
  virtual std::map<std::string, std::map<std::string, kernels::Tensor*>> state() = 0;
  // Where step() runs when the parameters are on CUDA: the model's stream, so that the
  // update is ordered after the backward pass (required there; ignored on the CPU).
  void set_cuda_context(const kernels::cuda::Context& ctx) { ctx_ = ctx; }

 protected:
  std::int64_t t_ = 0;
  std::optional<kernels::cuda::Context> ctx_;
};

// sgd (momentum, nesterov, decoupled-free L2 weight decay as in PyTorch SGD) | adamw
// (decoupled weight decay as in PyTorch AdamW). Unknown kinds throw listing the valid ones.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg, std::vector<NamedParam> params);
std::vector<std::string> optimizer_kinds();  // sorted: adamw, sgd

// Learning rate at step (0-based): linear warm-up over warmup_steps, then constant | step | cosine
// (cosine decays from lr to min_lr over total_steps - warmup_steps).
// step decays by gamma every step_size steps counted from the end of the warm-up; cosine
// reaches min_lr at step total_steps (its last training step is one short of it). Unknown
// kinds throw listing the valid ones.
double learning_rate(const OptimizerConfig& cfg, std::int64_t step, std::int64_t total_steps);
std::vector<std::string> schedule_kinds();  // sorted: constant, cosine, step

}  // namespace codistill
