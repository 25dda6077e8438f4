#include "codistill/teachers/teacher_gate.hpp"

#include <chrono>
#include <cmath>

#include <fmt/format.h>

namespace codistill {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
}  // namespace

std::string gate_refusal(const GateConfig& cfg, double loss, double own_loss) {
  if (!std::isfinite(loss)) return fmt::format("its probe loss is not finite ({})", loss);
  if (cfg.max_loss > 0 && loss > cfg.max_loss)
    return fmt::format("its probe loss {:.4f} is above codistill.gate.max_loss {:.4g}", loss, cfg.max_loss);
  // A student whose own loss is not finite (diverged itself) cannot judge by ratio: only the
  // absolute bounds apply then.
  if (cfg.max_ratio > 0 && std::isfinite(own_loss) && loss > cfg.accept_below && loss > cfg.max_ratio * own_loss)
    return fmt::format("its probe loss {:.4f} is above codistill.gate.max_ratio {:.4g} x this worker's {:.4f}", loss,
                       cfg.max_ratio, own_loss);
  return "";
}

TeacherGate::TeacherGate(GateConfig cfg, ProbeFn probe, Model& student)
    : cfg_(cfg), probe_(std::move(probe)), student_(student) {}

GateVerdict TeacherGate::judge(Model& teacher, std::int64_t step) {
  GateVerdict v;
  const auto t0 = Clock::now();
  if (own_step_ != step) {
    own_loss_ = probe_(student_).loss;
    own_step_ = step;
  }
  v.own_loss = own_loss_;
  v.loss = probe_(teacher).loss;
  v.ms = ms_since(t0);
  v.reason = gate_refusal(cfg_, v.loss, v.own_loss);
  v.accepted = v.reason.empty();
  return v;
}

}  // namespace codistill
