#include "codistill/train/memory_report.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "checkpoint/source.hpp"
#include "checkpoint/store.hpp"
#include "codistill/config/config_loader.hpp"
#include "codistill/util/memory_info.hpp"
#include "codistill/util/rng.hpp"

namespace codistill::setup {

namespace {

// The `model` attribute of the checkpoints a fixed-teacher entry names (a file, a worker's
// newest, each worker's newest in a run directory), read without verifying (start_teachers
// verifies what it loads); nullopt for an entry it cannot read (planned as the student).
std::vector<std::optional<std::string>> fixed_teacher_models(const std::string& entry) {
  using Kind = checkpoint::CheckpointSource::Kind;
  std::vector<std::optional<std::string>> out;
  auto newest = [&](const std::string& run_dir, int worker) -> std::optional<std::string> {
    const auto files = checkpoint::RunStore(run_dir).checkpoints(worker);
    for (auto it = files.rbegin(); it != files.rend(); ++it) try {
        return checkpoint::read_meta(it->path).model;
      } catch (const std::exception&) {  // torn or foreign: an older one tells the architecture too
      }
    return std::nullopt;
  };
  try {
    const checkpoint::CheckpointSource src = checkpoint::classify_source(entry);
    if (src.kind == Kind::file) out.push_back(checkpoint::read_meta(src.path).model);
    else if (src.kind == Kind::worker_dir) out.push_back(newest(src.run_dir, src.worker));
    else
      for (int w : src.workers) out.push_back(newest(src.run_dir, w));
  } catch (const std::exception&) {
    out.push_back(std::nullopt);  // start_teachers refuses it, naming the key
  }
  return out;
}

// The K teachers' models: the peers that teach at once (codistill.teachers, 0 for all)
// by their `worker_models`, and the fixed teachers by their checkpoints' own; null where it
// is the student's architecture, else built here (owned) on the host to be planned.
std::vector<Model*> teacher_models(const Config& c, Model& student, const ModelFactory& factory,
                                   std::vector<std::unique_ptr<Model>>& owned) {
  std::vector<std::optional<ModelConfig>> configs;
  int peers = 0;
  for (int p = 0; c.codistill.enabled && p < c.run.workers; ++p) {
    if (p == c.run.worker) continue;
    if (c.codistill.teachers > 0 && peers >= c.codistill.teachers) break;
    configs.push_back(model_of(c, p));
    ++peers;
  }
  for (const std::string& entry : c.codistill.fixed_teachers)
    for (const auto& yaml : fixed_teacher_models(entry))
      configs.push_back(yaml ? std::optional(model_from_yaml(*yaml, entry)) : std::nullopt);
  const ModelConfig& mine = model_of(c, c.run.worker);
  std::vector<Model*> out;
  for (auto& mc : configs) {
    if (!mc || model_differences(*mc, mine).empty()) {
      out.push_back(nullptr);
      continue;
    }
    mc->input_shape = student.input_shape();  // a teacher agrees on input shape and classes
    mc->classes = student.root().output_shape(student.input_shape()).back();
    Rng rng(1);
    try {  // built as the pool will build it (TrainOptions::model_factory where set)
      owned.push_back(std::make_unique<Model>(factory ? factory(*mc, rng) : build_model(*mc, rng)));
      out.push_back(owned.back().get());
    } catch (const std::exception&) {
      // One the plan cannot build is planned as the student's size; the pool refuses it
      // later with the reason when it is really broken.
      out.push_back(nullptr);
    }
  }
  return out;
}

}  // namespace

void plan_memory(Trainer::State& s) {
  const Config& c = s.cfg;
  MemoryPlanInputs in;
  in.data_bytes = s.learner.modality->data_bytes();
  // Resident now: the data and the model's arena (the plan's own lines), and the rest: code,
  // libraries, threads, what loading left behind (the runtime line).
  ParamArena& arena = s.learner.model.arena();
  const auto arena_bytes = arena.values().nbytes() + arena.grads().nbytes() + arena.buffers().nbytes();
  const std::int64_t counted = in.data_bytes + static_cast<std::int64_t>(arena_bytes);
  in.resident_bytes = memory::resident_bytes().value_or(0);
  in.runtime_bytes = std::max<std::int64_t>(0, in.resident_bytes - counted);
  // The slots come with the first step: an optimizer made here only names them.
  in.optimizer_slots = static_cast<std::int64_t>(make_optimizer(c.optimizer, s.learner.model)->slot_count());
  std::vector<std::unique_ptr<Model>> teachers;  // planned, then released
  in.teachers = teacher_models(c, s.learner.model, s.opts.model_factory, teachers);
  in.teacher_reloads = c.codistill.enabled && c.run.workers > 1;
  in.double_buffered = c.data.prefetch != "off" && !is_token_data(c.data);
  const kernels::Backend& backend = kernels::backend_for(s.learner.device);
  in.device_is_host = !backend.device_memory(s.learner.device.index).has_value();
  in.device = s.learner.device.str();
  s.memory_plan = codistill::plan_memory(s.learner.model, c, in);
  check_memory_fits(*s.memory_plan, memory_budget(c, backend, s.learner.device), c);
}

void report_memory_plan(Trainer::State& s) {
  if (!s.memory_plan || !s.lead) return;
  s.log->info("{}", s.memory_plan->table());
  nlohmann::json fields = s.memory_plan->to_json();
  fields["phase"] = "plan";
  s.files.metrics->emit("memory", s.learner.worker.step, fields);
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
    const auto dev = s.learner.model.queue().backend().device_memory(s.learner.device.index);
    if (dev && dev->peak >= 0) {
      fields["device_peak_bytes"] = dev->peak;
      line += fmt::format("; {} planned {}, measured peak {}", plan.device, memory::format_bytes(plan.device_bytes()),
                          memory::format_bytes(dev->peak));
    }
  }
  s.files.metrics->emit("memory", s.learner.worker.step, fields);
  s.log->info("{}", line);
}

}  // namespace codistill::setup
