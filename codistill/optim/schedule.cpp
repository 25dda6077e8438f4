// learning_rate: linear warm-up, then constant | step | cosine. Decay schedules count
// steps from the end of the warm-up, so a warm-up never shifts where the decay ends.
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

#include "codistill/optim/optimizer.hpp"

namespace codistill {

std::vector<std::string> schedule_kinds() { return {"constant", "cosine", "step"}; }

double learning_rate(const OptimizerConfig& cfg, std::int64_t step, std::int64_t total_steps) {
  const ScheduleConfig& s = cfg.schedule;
  if (s.kind != "constant" && s.kind != "step" && s.kind != "cosine")
    throw std::invalid_argument("unknown schedule kind '" + s.kind + "' (valid: constant, cosine, step)");
  if (step < 0) throw std::invalid_argument("learning_rate: negative step " + std::to_string(step));
  if (s.warmup_steps < 0)
    throw std::invalid_argument("schedule.warmup_steps must be >= 0, got " + std::to_string(s.warmup_steps));
  const double lr = cfg.lr;
  if (step < s.warmup_steps)
    return lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  const std::int64_t since = step - s.warmup_steps;
  if (s.kind == "constant") return lr;
  if (s.kind == "step") {
    if (s.step_size < 1)
      throw std::invalid_argument("schedule.step_size must be >= 1, got " + std::to_string(s.step_size));
    return lr * std::pow(s.gamma, static_cast<double>(since / s.step_size));
  }
  // cosine: lr at the end of the warm-up, min_lr at total_steps and after.
  const std::int64_t span = total_steps - s.warmup_steps;
  if (span <= 0 || since >= span) return s.min_lr;
  const double progress = static_cast<double>(since) / static_cast<double>(span);
  return s.min_lr + (lr - s.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace codistill
