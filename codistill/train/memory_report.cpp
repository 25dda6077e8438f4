#include "codistill/train/memory_report.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "codistill/util/memory_info.hpp"

namespace codistill::setup {

namespace {

// K: the peers that teach at once (codistill.teachers, 0 for all) and the fixed teachers.
int teacher_count(const Config& c) {
  int peers = 0;
  if (c.codistill.enabled) {
    peers = c.run.workers - 1;
    if (c.codistill.teachers > 0) peers = std::min(peers, c.codistill.teachers);
  }
  return peers + static_cast<int>(c.codistill.fixed_teachers.size());
}

}  // namespace

void plan_memory(Trainer::State& s) {
  const Config& c = s.cfg;
  MemoryPlanInputs in;
  in.data_bytes = s.modality->data_bytes();
  // Resident now: the data and the model's arena (the plan's own lines), and the rest: code,
  // libraries, threads, what loading left behind (the runtime line).
  ParamArena& arena = s.model.arena();
  const std::int64_t counted = in.data_bytes + static_cast<std::int64_t>(arena.values().nbytes() +
                                                                         arena.grads().nbytes() + arena.buffers().nbytes());
  in.resident_bytes = memory::resident_bytes().value_or(0);
  in.runtime_bytes = std::max<std::int64_t>(0, in.resident_bytes - counted);
  // The slots come with the first step: an optimizer made here only names them.
  in.optimizer_slots = static_cast<std::int64_t>(make_optimizer(c.optimizer, s.model)->slot_count());
  in.teachers = teacher_count(c);
  in.teacher_reloads = c.codistill.enabled && in.teachers > static_cast<int>(c.codistill.fixed_teachers.size());
  in.double_buffered = c.data.prefetch != "off" && !is_token_data(c.data);
  const kernels::Backend& backend = kernels::backend_for(s.device);
  in.device_is_host = !backend.device_memory(s.device.index).has_value();
  in.device = s.device.str();
  s.memory_plan = codistill::plan_memory(s.model, c, in);
  check_memory_fits(*s.memory_plan, memory_budget(c, backend, s.device), c);
}

void report_memory_plan(Trainer::State& s) {
  if (!s.memory_plan || !s.lead) return;
  s.log->info("{}", s.memory_plan->table());
  nlohmann::json fields = s.memory_plan->to_json();
  fields["phase"] = "plan";
  s.metrics->emit("memory", s.worker.step, fields);
}

void report_measured_memory(Trainer::State& s) {
  if (!s.memory_plan || !s.lead) return;
  const MemoryPlan& plan = *s.memory_plan;
  nlohmann::json fields = {{"phase", "measured"}, {"planned_host_bytes", plan.host_bytes()}};
  std::string line = fmt::format("memory: planned {} on the host", memory::format_bytes(plan.host_bytes()));
  if (const auto peak = memory::resident_peak_bytes()) {
    fields["host_peak_bytes"] = *peak;
    fields["host_plan_ratio"] = static_cast<double>(plan.host_bytes()) / static_cast<double>(*peak);
    line += fmt::format(", measured peak {} (VmHWM; plan/peak {:.3f})", memory::format_bytes(*peak),
                        static_cast<double>(plan.host_bytes()) / static_cast<double>(*peak));
  }
  if (!plan.device_is_host) {
    fields["planned_device_bytes"] = plan.device_bytes();
    const auto dev = s.model.queue().backend().device_memory(s.device.index);
    if (dev && dev->peak >= 0) {
      fields["device_peak_bytes"] = dev->peak;
      line += fmt::format("; {} planned {}, measured peak {}", plan.device, memory::format_bytes(plan.device_bytes()),
                          memory::format_bytes(dev->peak));
    }
  }
  s.metrics->emit("memory", s.worker.step, fields);
  s.log->info("{}", line);
}

}  // namespace codistill::setup
