#pragma once
// The memory plan in a Trainer's life (codistill/train/memory_plan.hpp for the plan itself):
// made and checked before the run directory is claimed (a run that will not fit stops
// there, exit 2), printed and sent to metrics.jsonl once the logs are open, and compared
// with the measured peak at the end of the run. Private to train/
#include <cstdint>

#include "codistill/train/trainer_state.hpp"

namespace codistill::setup {

// The plan for the built model and the config; throws ConfigError (train.memory_limit)
// with the plan and what to change when it will not fit. Writes nothing.
void plan_memory(Trainer::State& s);
// The plan as a table in the log and a `memory` event (phase "plan") in metrics.jsonl.
void report_memory_plan(Trainer::State& s);
// The measured peaks beside the plan: a `memory` event (phase "measured") and a log line.
void report_measured_memory(Trainer::State& s);

}  // namespace codistill::setup
