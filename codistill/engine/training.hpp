#pragma once
// The training engine of one worker: data, model, optimizer and schedule from the config,
// the step loop with the fused loss of DESIGN.md section 6, evaluation, metrics.jsonl
// (section 7), the human log and the progress display.
#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "codistill/config/config.hpp"
#include "codistill/data/dataset.hpp"
#include "codistill/models/model.hpp"

namespace codistill {

// A failure of the run itself (non-finite loss, unusable device): exit code 1.
class TrainingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct EvalResult {
  double loss = 0;
  double accuracy = 0;
  std::int64_t examples = 0;
};

// Runs model over d in order, batch rows at a time (inference mode). When predictions is
// given it receives the argmax class of every example.
EvalResult evaluate(Model& model, const data::Dataset& d, std::int64_t batch,
                    std::vector<std::int32_t>* predictions = nullptr);

struct TrainOptions {
  bool resume = true;        // continue from this worker's checkpoints when there are any
  bool console = true;       // log lines on stdout as well as in train.log
  bool interactive = false;  // one in-place progress line (stdout is a terminal)
};

struct TrainSummary {
  std::int64_t steps = 0;
  double wall_s = 0;
  double examples_per_s = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  bool interrupted = false;
};

// SIGINT/SIGTERM set this flag; the loop finishes its step and stops cleanly.
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

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace codistill
