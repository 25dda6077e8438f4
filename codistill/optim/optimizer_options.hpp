#pragma once
// The optimizer section of the config (docs/config.md, `optimizer`): what optimizers and
// learning-rate schedules take. The config layer (codistill/config) fills it from YAML.
#include <cstdint>
#include <string>
#include <vector>

namespace codistill {

struct ScheduleConfig {
  std::string kind = "constant";  // constant | step | exponential | cosine | cyclical | sgdr
  std::int64_t warmup_steps = 0;  // linear warm-up from 0 to lr
  std::int64_t step_size = 1000;  // step, exponential: lr is multiplied by gamma every step_size steps
  double gamma = 0.1;             // step, exponential: the factor per step_size steps
  double min_lr = 0.0;            // cosine, exponential, cyclical, sgdr: the floor
  std::int64_t half_cycle_steps = 1000;   // cyclical: steps from min_lr up to lr (half a cycle)
  std::string cycle_mode = "triangular";  // cyclical: triangular | triangular2 (height halves each cycle)
  std::int64_t restart_steps = 1000;      // sgdr: length of the first cosine period (T_0)
  std::int64_t restart_mult = 1;          // sgdr: each period this many times the one before (T_mult)
};

struct OptimizerConfig {
  std::string kind = "sgd";  // sgd | adamw
  double lr = 0.05;
  double momentum = 0.9;  // sgd
  bool nesterov = false;  // sgd
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adamw
  double clip_grad_norm = 0.0;  // gradients scaled to this global L2 norm when above it; 0: off
  // Which parameters weight decay applies to: all | matrices (those of 2 or more dimensions:
  // the weights of linear, convolution and embedding layers; not biases, nor normalization
  // gains and shifts: GPT-2's recipe).
  std::string decay = "all";
  ScheduleConfig schedule;
};

}  // namespace codistill
