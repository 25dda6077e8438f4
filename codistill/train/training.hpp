#pragma once
// The trainer of one worker: data, model, optimizer and schedule from the config;
// the run loop, which schedules every-N events (teacher reloads, logs, evaluations,
// checkpoints) around TrainStep (train/step.hpp, the phases of one step); metrics.jsonl
// (DESIGN.md section 7), the human log and the progress display.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "codistill/config/config.hpp"
#include "codistill/data/dataset.hpp"
#include "codistill/dist/process_group.hpp"
#include "codistill/util/run_errors.hpp"
#include "codistill/eval/evaluate.hpp"
#include "codistill/models/model.hpp"
#include "codistill/util/rng.hpp"

namespace codistill {

struct TrainOptions {
  bool resume = true;        // continue from this worker's checkpoints when there are any
  bool console = true;       // log lines on stdout as well as in train.log
  bool interactive = false;  // one in-place progress line (stdout is a terminal)
  // The worker's process group when it is a group of ranks (docs/architecture.md section 5):
  // rank 0 writes and evaluates, every rank trains on its slice of the group's batch. Unset:
  // one process (a "single" group).
  std::shared_ptr<dist::ProcessGroup> group;
  // Builds the worker's model from its (resolved) model section; unset: build_model
  // (codistill/models). For in-process tests of a model the factory does not have (a
  // language model before its kind is built); teachers are rebuilt with it too.
  std::function<Model(const ModelConfig&, Rng&)> model_factory;
};

struct TrainSummary {
  std::int64_t steps = 0;
  double wall_s = 0;
  double examples_per_s = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  bool interrupted = false;
};

// SIGINT/SIGTERM set this flag; the loop finishes its step and stops cleanly. The signals
// are taken by a thread of their own and blocked in the caller, so that no thread the caller
// starts after the first call (the OpenMP team above all) is ever interrupted by them: call
// it first. Each call installs the handler and blocks the signals again. A child process
// started later would inherit them blocked (execve keeps the mask): unblock them in it.
void install_stop_signal_handlers();
void request_stop();
bool stop_requested();

class Trainer {
 public:
  Trainer(Config cfg, TrainOptions opts);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  TrainSummary run();
  Model& model();
  const Config& config() const;

  // Defined in train/trainer_state.hpp, which only the set-up phases
  // (trainer_setup.hpp) and run loop include: named here so that they can take it.
  struct State;

 private:
  // A group's ranks other than 0 take rank 0's teachers (train/group.hpp).
  void share_teachers(std::int64_t step);
  std::unique_ptr<State> s_;
};

}  // namespace codistill
