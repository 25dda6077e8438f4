// learning_rate: linear warm-up, then constant | step | exponential | cosine | cyclical |
// sgdr. Every schedule after the warm-up counts its steps from the end of the warm-up, so
// a warm-up never shifts where a decay ends or where a cycle or restart falls.
// Periods are counted in integers (cycles and restarts fall on exact steps); only the
// value inside a period is computed in floating point.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

#include "codistill/optim/optimizer.hpp"

namespace codistill {
namespace {

[[noreturn]] void bad(const std::string& key, const std::string& expected, const std::string& got) {
  throw std::invalid_argument("schedule." + key + " must be " + expected + ", got " + got);
}

void require_at_least(const char* key, std::int64_t value, std::int64_t lo) {
  if (value < lo) bad(key, ">= " + std::to_string(lo), std::to_string(value));
}

// min_lr + (lr - min_lr) * (1 + cos(pi * progress)) / 2, progress in [0, 1).
double cosine_between(double lr, double min_lr, double progress) {
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

// Smith 2017, "Cyclical learning rates for training neural networks": a triangle wave
// from min_lr (at the start of each cycle) up to lr (half_cycle_steps later) and back.
// triangular2 halves the height of the triangle after every cycle.
double cyclical(const ScheduleConfig& s, double lr, std::int64_t since) {
  require_at_least("half_cycle_steps", s.half_cycle_steps, 1);
  // Half cycles counted directly, so that no 2 * half_cycle_steps can overflow.
  const std::int64_t halves = since / s.half_cycle_steps;
  const std::int64_t into = since % s.half_cycle_steps;
  const std::int64_t up = halves % 2 == 0 ? into : s.half_cycle_steps - into;
  const double height = static_cast<double>(up) / static_cast<double>(s.half_cycle_steps);
  double amplitude = lr - s.min_lr;
  if (s.cycle_mode == "triangular2") {
    // 2^-cycle underflows to 0 after ~1075 cycles: the rate then stays at min_lr.
    amplitude = std::ldexp(amplitude, -static_cast<int>(std::min<std::int64_t>(halves / 2, 2000)));
  } else if (s.cycle_mode != "triangular") {
    bad("cycle_mode", "one of triangular, triangular2", "'" + s.cycle_mode + "'");
  }
  return s.min_lr + amplitude * height;
}

// Loshchilov & Hutter 2017, "SGDR: stochastic gradient descent with warm restarts": a
// cosine from lr down towards min_lr over restart_steps (T_0), then a restart at lr, each
// period restart_mult (T_mult) times longer than the one before. The step that starts a
// period gets lr exactly; min_lr itself is reached only in the limit, as in the paper.
double sgdr(const ScheduleConfig& s, double lr, std::int64_t since) {
  require_at_least("restart_steps", s.restart_steps, 1);
  require_at_least("restart_mult", s.restart_mult, 1);
  std::int64_t into = since;  // steps into the current period
  std::int64_t period = s.restart_steps;
  while (into >= period) {
    into -= period;
    // The next period is longer than what is left of `since`: it is the current one. Its
    // length is kept in a double then, so that restart_mult^n never overflows.
    if (period > into / s.restart_mult)
      return cosine_between(lr, s.min_lr,
                            static_cast<double>(into) / (static_cast<double>(period) * static_cast<double>(s.restart_mult)));
    period *= s.restart_mult;
  }
  return cosine_between(lr, s.min_lr, static_cast<double>(into) / static_cast<double>(period));
}

}  // namespace

std::vector<std::string> schedule_kinds() { return {"constant", "cosine", "cyclical", "exponential", "sgdr", "step"}; }

double learning_rate(const OptimizerConfig& cfg, std::int64_t step, std::int64_t total_steps) {
  const ScheduleConfig& s = cfg.schedule;
  const auto kinds = schedule_kinds();
  if (std::find(kinds.begin(), kinds.end(), s.kind) == kinds.end()) {
    std::string valid;
    for (const auto& k : kinds) valid += (valid.empty() ? "" : ", ") + k;
    throw std::invalid_argument("unknown schedule kind '" + s.kind + "' (valid: " + valid + ")");
  }
  if (step < 0) throw std::invalid_argument("learning_rate: negative step " + std::to_string(step));
  require_at_least("warmup_steps", s.warmup_steps, 0);
  const double lr = cfg.lr;
  if (step < s.warmup_steps)
    return lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  const std::int64_t since = step - s.warmup_steps;
  if (s.kind == "constant") return lr;
  if (s.kind == "step") {
    require_at_least("step_size", s.step_size, 1);
    return lr * std::pow(s.gamma, static_cast<double>(since / s.step_size));
  }
  if (s.kind == "exponential") {
    // The continuous form of `step`: the same factor gamma per step_size steps, applied a
    // little every step; floored at min_lr (a decay never goes below it).
    require_at_least("step_size", s.step_size, 1);
    const double decayed = lr * std::pow(s.gamma, static_cast<double>(since) / static_cast<double>(s.step_size));
    return std::max(decayed, s.min_lr);
  }
  if (s.kind == "cyclical") return cyclical(s, lr, since);
  if (s.kind == "sgdr") return sgdr(s, lr, since);
  // cosine: lr at the end of the warm-up, min_lr at total_steps and after.
  const std::int64_t span = total_steps - s.warmup_steps;
  if (span <= 0 || since >= span) return s.min_lr;
  return cosine_between(lr, s.min_lr, static_cast<double>(since) / static_cast<double>(span));
}

}  // namespace codistill
