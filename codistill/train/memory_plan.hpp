#pragma once
// The memory plan: what a run will hold at its peak, computed before the first step from the
// built model (its arena and each module's activation buffers, Module::plan_activations),
// the optimizer's state slots, the batch (rows per micro-batch, and T for text), the
// teachers, the checkpoint staging and the data, with the peak measured afterwards for
// comparison. A plan larger than what is available (train.memory_limit) is a ConfigError
// (exit 2) carrying the plan and what to change. Host and device are planned apart: on a
// backend whose device memory is host memory (the CPU) there is only the host.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codistill/config/config.hpp"
#include "codistill/models/model.hpp"

namespace codistill {

// What the plan needs besides the model and the config: measured or known at start.
struct MemoryPlanInputs {
  std::int64_t runtime_bytes = 0;   // resident besides data and arena: code, libraries, threads
  std::int64_t resident_bytes = 0;  // resident when planning (the free memory is beyond it)
  std::int64_t data_bytes = 0;      // the loaded data (Modality::data_bytes)
  std::int64_t optimizer_slots = 0; // state blocks laid out like the parameters (momentum: 1, AdamW: 2)
  // The K teachers at once (peers in use and fixed teachers): each one's model, built on the
  // host, or null for one of the student's architecture.
  std::vector<Model*> teachers;
  bool teacher_reloads = false;     // peers: a new teacher loads while the old one teaches
  bool double_buffered = false;     // the step's inputs twice (the next batch prepared ahead)
  bool device_is_host = true;       // the model's memory is host memory (the CPU backend)
  std::string device = "cpu";
};

struct MemoryPlan {
  struct Line {
    std::string name;  // json key: "parameters", "activations", ...
    std::int64_t bytes = 0;
    bool on_device = false;  // device memory (false: host memory)
    std::string note;        // how it was counted
  };
  std::vector<Line> lines;
  std::string device;
  bool device_is_host = true;
  std::int64_t resident_bytes = 0;  // resident when planned: the host's free memory is beyond it
  std::string recompute = "none";   // train.recompute as the model runs it (Model::set_recompute)

  std::int64_t host_bytes() const;
  std::int64_t device_bytes() const;
  std::int64_t bytes(const std::string& name) const;  // 0 where there is no such line
  // The table printed at start, one line per component and the totals.
  std::string table() const;
  // The `memory` event's fields: each line's bytes, host_bytes, device_bytes.
  nlohmann::json to_json() const;
};

// The plan for `model` (built, on the host or placed) trained as cfg says.
MemoryPlan plan_memory(Model& model, const Config& cfg, const MemoryPlanInputs& in);

// What is available to the run: train.memory_limit, or with "auto" the host's (or the
// device's) free memory; nullopt with "off" or where nothing says. Throws ConfigError for a
// limit that does not parse.
struct MemoryBudget {
  std::int64_t host = -1;    // bytes, -1: unchecked
  std::int64_t device = -1;  // bytes, -1: unchecked
  std::string source;        // "train.memory_limit", "MemAvailable", ...
};
MemoryBudget memory_budget(const Config& cfg, const kernels::Backend& backend, const kernels::Device& device);

// Throws ConfigError naming train.memory_limit, with the plan's table and what to change,
// where the plan exceeds the budget.
void check_memory_fits(const MemoryPlan& plan, const MemoryBudget& budget, const Config& cfg);

}  // namespace codistill
