#pragma once
// One training step of a worker, its phases in order and in one place, for every backend
// (DESIGN.md section 2, "Step"):
//   1. batch            the sampler's next indices gathered into host staging memory and
//                       copied to the device (on the CPU the staging memory is the batch
//                       itself: no copy); an event marks the batch ready
//   2. teachers         each teacher's forward on its own queue once the batch is ready
//   3. student forward
//   4. loss             the fused loss of DESIGN.md section 6 against the teachers' logits
//                       (the student's queue waits for each teacher's forward); the values
//                       come back to the host, a non-finite loss stops the run
//   5. backward         gradients zeroed (one op over the arena), then the backward pass
//   6. reduce           the gradient-reduction hook: identity in one process; a worker
//                       group all-reduces the arena's gradient block here
//   7. snapshot wait    a checkpoint snapshot being copied behind phases 1-6 must be done
//                       before the parameters change
//   8. optimizer        one update op over the arena
// The run loop (Trainer::run) decides when to log, evaluate, checkpoint and reload teachers.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "codistill/data/dataset.hpp"
#include "codistill/data/sampler.hpp"
#include "codistill/engine/teachers.hpp"
#include "codistill/models/model.hpp"
#include "codistill/optim/optimizer.hpp"
#include "kernels/backend.hpp"

namespace codistill {

struct StepHooks {
  // Phase 6: sums the gradient block over the worker's ranks (unset: identity).
  std::function<void(kernels::Tensor& grads, kernels::Queue& q)> reduce_gradients;
  // Phase 7: waits for a checkpoint snapshot in flight (unset: nothing to wait for).
  std::function<void()> before_update;
};

struct StepResult {
  kernels::DistillLossResult loss;
  int teachers = 0;  // teachers whose logits entered the loss
};

class TrainStep {
 public:
  // The student's device buffers for batches of `batch` examples of `train`.
  TrainStep(Model& student, const data::Dataset& train, std::int64_t batch, kernels::DistillLossParams params);
  ~TrainStep();  // waits for the student's queue
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  // One step (phases 1-8). step: the 1-based number of this step, for error messages.
  // teachers may be empty (no distillation this step).
  StepResult run(std::int64_t step, data::BatchSampler& sampler, const std::vector<Teacher*>& teachers,
                 Optimizer& optimizer, double lr, const StepHooks& hooks = {});

 private:
  Model& student_;
  const data::Dataset& train_;
  std::int64_t batch_;
  kernels::DistillLossParams params_;
  kernels::Tensor x_, labels_, dlogits_;          // on the student's device
  kernels::Tensor x_stage_, labels_stage_;        // host-visible (the same tensors on the CPU)
  std::unique_ptr<kernels::Event> input_ready_;   // after the batch copy: teachers wait on it
  std::vector<std::int64_t> indices_;
  std::vector<std::int32_t> label_rows_;
  std::vector<const kernels::Tensor*> teacher_logits_;
};

}  // namespace codistill
