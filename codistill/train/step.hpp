#pragma once
// One training step of a worker, its phases in order and in one place, for every backend
// (DESIGN.md section 2, "Step"):
//   1. batch            the batch source (data/feed/batch_source.hpp: images through the
//                       sampler and BatchLoader, or text windows) fills host staging memory
//                       with this step's batch, which is copied to the device (on the CPU
//                       the staging memory is the batch itself: no copy); an event marks
//                       the batch ready. With prefetch (data.prefetch, images) the gather
//                       and augmentation of step s + 1 run on a helper thread during step s,
//                       into a second set of buffers (data/feed/batch_loader.hpp): the batches,
//                       and the sampler position a checkpoint saves, are the same as without
//   2. teachers         each teacher's forward on its own queue once the batch is ready
//   3. student forward
//   4. loss             the fused loss of DESIGN.md section 6 against the teachers' logits
//                       (train.fused_head: the student's and teachers' linear heads applied
//                       inside the loss, chunk by chunk, from their features; the step's
//                       gradients are then zeroed before the loss, which adds the head's)
//                       (the student's queue waits for each teacher's forward); the values
//                       come back to the host, a non-finite loss stops the run
//   5. backward         gradients zeroed (one op over the arena; none where every module
//                       with parameters writes its gradients in its first backward, as
//                       Linear does: Model::zero_grad_lazily), then the backward pass
//   6. reduce           the gradient-reduction hook: identity in one process; a worker
//                       group sums the arena's gradient block over its ranks here. Each
//                       rank's loss weights are scaled by its share of the group's rows
//                       (rows_rank / rows_group, exactly 1 in one process), so that sum is
//                       the gradient of the group batch's mean loss, and the ranks' loss
//                       values sum to the group's mean
//   7. snapshot         a checkpoint taken after the previous step still needs that state:
//                       on the CPU this step's update is then out of place, into a second
//                       set of blocks, and the blocks it read are the checkpoint's (no
//                       copy); a device's host copy, copied behind phases 1-6, must be done
//   8. optimizer        one update op over the arena (in place, or out of place per 7)
// With gradient accumulation (train.micro_batches = K > 1) the batch is split into K equal
// micro-batches, gathered and copied each into its own device tensors (phase 1), and
// phases 2-5 run once per micro-batch; the gradients of all K add up in the arena's
// gradient block, zeroed once before the first backward (every backward op accumulates,
// kernels/backend.hpp; where the zeroing is lazy, the first backward writes and the
// others add). Phases 6-8 run once per step. The fused loss averages over its own
// rows, so micro-batch i's loss weights (a and h) are scaled by rows_i / rows of the batch:
// its gradient and loss are then its share of the whole batch's mean, and their sums are
// the full-batch gradient and loss up to float rounding. Exact for models whose forward
// treats rows independently: BatchNorm normalizes each micro-batch with its own statistics
// (and updates its running statistics K times per step); dropout draws from one sequential
// stream per layer, so its masks match a single pass over the batch.
// The run loop (Trainer::run) decides when to log, evaluate, checkpoint and reload teachers.
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "codistill/data/augment.hpp"
#include "codistill/data/dataset.hpp"
#include "codistill/data/sampler.hpp"
#include "codistill/data/feed/batch_loader.hpp"
#include "codistill/data/feed/batch_source.hpp"
#include "codistill/teachers/teachers.hpp"
#include "codistill/models/model.hpp"
#include "codistill/optim/optimizer.hpp"
#include "kernels/backend.hpp"

namespace codistill {

// Where a step's host time went, phase by phase (bench/bench_step_phases). The step reads the
// host clock at each phase boundary and adds the interval to its phase; micro-batches add up.
// On the CPU backend every op runs on the calling thread's team before returning, so these
// are the phases' costs; on a device queue they are the host's enqueue and wait times.
struct StepTimes {
  enum Phase { batch, teachers, forward, loss, zero_grad, backward, reduce, snapshot_wait, update, count };
  static constexpr std::array<const char*, count> names{"batch",    "teachers", "forward",       "loss",  "zero_grad",
                                                        "backward", "reduce",   "snapshot_wait", "update"};
  std::array<double, count> seconds{};  // summed over the steps run with this record
  std::int64_t steps = 0;

  void start() { last_ = std::chrono::steady_clock::now(); }
  void mark(Phase p) {
    const auto now = std::chrono::steady_clock::now();
    seconds[static_cast<std::size_t>(p)] += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }

 private:
  std::chrono::steady_clock::time_point last_{};
};

struct StepHooks {
  // During the last micro-batch's backward (phase 5), each time the gradient block is final
  // from element `first` to its end (Model::set_gradients_ready): where phase 6 may start
  // reducing it already (unset: nothing happens early).
  std::function<void(std::int64_t first)> gradients_ready;
  // Phase 6: sums the gradient block over the worker's ranks (unset: identity).
  std::function<void(kernels::Tensor& grads, kernels::Queue& q)> reduce_gradients;
  // Phase 7: a checkpoint of the previous step still needs its state (unset: none). Returns
  // the blocks this step's update writes instead of the live ones (Optimizer::step_into:
  // the live blocks, the state before the update, become the checkpoint's, with no copy),
  // or nothing for an update in place; may wait (a copy in flight, a write that holds the
  // blocks to reuse). CheckpointManager::before_update.
  std::function<std::optional<OptimizerBlocks>()> before_update;
  // After phase 8: the blocks an out-of-place update read (none after one in place), and the
  // update's host seconds. CheckpointManager::after_update. Set with before_update: the
  // blocks an out-of-place update read hold the checkpoint's state, and only this hook
  // gets them.
  std::function<void(std::optional<OptimizerBlocks> before, double update_s)> after_update;
  // Adds this step's phase times (unset: the clock is not read).
  StepTimes* times = nullptr;
};

// How phase 1 prepares image batches (data.augment, data.prefetch).
struct StepInput {
  data::AugmentOptions augment;  // default: none
  bool prefetch = false;         // prepare the next step's batch on a helper thread
  RankSlice slice;               // a group's rank trains on its slice of the group's batch
};

struct StepResult {
  kernels::DistillLossResult loss;
  int teachers = 0;  // teachers whose logits entered the loss
};

class TrainStep {
 public:
  // The student's device buffers for batches of `batch` rows (examples or windows) from
  // `source`, passed through the model in `micro_batches` equal parts (which must divide
  // `batch`). In a group, `batch` is this rank's rows (the source draws the group's).
  // double_buffer: two sets of batch buffers, for a source that prepares the next step's
  // batch while this one computes (image prefetch).
  TrainStep(Model& student, std::unique_ptr<BatchSource> source, std::int64_t batch,
            kernels::DistillLossParams params, std::int64_t micro_batches = 1, bool double_buffer = false);
  // Images: an ImageBatchSource over `sampler` (which must outlive the step).
  TrainStep(Model& student, const data::Dataset& train, data::BatchSampler& sampler, std::int64_t batch,
            kernels::DistillLossParams params, std::int64_t micro_batches = 1, const StepInput& input = {});
  ~TrainStep();  // waits for the student's queue
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  // One step (phases 1-8). step: the 1-based number of this step (it keys the batch's
  // draws, and names the step in error messages). teachers may be empty (no
  // distillation this step). Successive calls are expected to pass successive steps for
  // prefetch to help; anything else is still correct (the prefetched batch is discarded
  // and the batch prepared on the spot).
  // train.fused_head: phases 3-5 leave the student's (and each teacher's) linear head out of
  // the forward and apply it inside the loss (Backend::linear_distill_head: rows in chunks,
  // never the [rows, classes] logits of the student or of the K teachers), then backward
  // from the features' gradient. The same loss and gradients as the unfused step up to
  // float rounding. Throws std::invalid_argument when the student has no linear head (a
  // teacher without one fails its step, naming it).
  void set_fused_head(bool on);
  bool fused_head() const { return fused_head_; }
  // How the fused head computes the teachers' logits (codistill.teacher_precision; their
  // own forwards compute as their queues say). The student's GEMMs follow its queue.
  void set_teacher_compute(kernels::Compute c) { teacher_compute_ = c; }

  StepResult run(std::int64_t step, const std::vector<Teacher*>& teachers, Optimizer& optimizer, double lr,
                 const StepHooks& hooks = {});

  BatchSource& source() { return *source_; }

 private:
  // One micro-batch's inputs. Separate allocations rather than views into one batch
  // tensor: each starts aligned as the backends' vectorized loads expect.
  struct Micro {
    kernels::Tensor x, labels;              // on the student's device
    kernels::Tensor x_stage, labels_stage;  // host-visible (the same tensors on the CPU)
  };
  // One set of batch buffers. Prefetch alternates between two: the helper thread fills one
  // while the step computes on the other.
  struct Slot {
    std::vector<Micro> micro;
    HostBatch host;                                // views of the micro-batches' staging tensors
    std::unique_ptr<kernels::Event> input_ready;   // after the batch copies: teachers wait on it
  };

  // Phases 2-5 for micro-batch i, whose weight in the batch mean is `share`.
  kernels::DistillLossResult micro_step(std::int64_t step, Slot& slot, std::size_t i, double share,
                                        const std::vector<Teacher*>& teachers, StepTimes* times);

  Model& student_;
  kernels::DistillLossParams params_;
  std::vector<Slot> slots_;  // one, or two with prefetch
  std::size_t current_ = 0;  // the slot of the next step
  // The parts of micro_step that differ with the head fused into the loss (set_fused_head).
  void queue_teachers(const kernels::Tensor& x, kernels::Event* ready, const std::vector<Teacher*>& teachers);
  kernels::DistillLossResult loss(const kernels::Tensor& out, const Micro& m, double share);
  // After the loss: the logits-read event and the finiteness check.
  void after_loss(const kernels::DistillLossResult& part, Slot& slot, std::int64_t step);

  bool fused_head_ = false;
  kernels::Compute teacher_compute_ = kernels::Compute::f32;
  kernels::Tensor dfeatures_;  // fused head: the features' gradient of one micro-batch
  std::vector<kernels::HeadTeacher> head_teachers_;
  kernels::Tensor dlogits_;  // of one micro-batch, on the student's device
  kernels::Shape dlogits_shape_;  // kept while the fused head leaves dlogits_ unheld
  // After a micro-batch's loss: the teachers' next forwards overwrite the logits it read.
  std::unique_ptr<kernels::Event> logits_read_;
  std::vector<const kernels::Tensor*> teacher_logits_;
  // Declared after the slots: destroyed first, it stops any helper thread before the
  // staging memory that thread may be writing is freed.
  std::unique_ptr<BatchSource> source_;
};

}  // namespace codistill
