#pragma once
// A failure of the run itself (non-finite loss, unusable device, a peer training another
// model): the executables turn it into exit code 1.
#include <stdexcept>

namespace codistill {

class TrainingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Starting a worker whose newest checkpoint is already at train.steps: nothing to do. The
// executable says so and exits 0, and nothing in the run directory is touched (no second
// evaluation or `done` line).
class WorkerFinished : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace codistill
