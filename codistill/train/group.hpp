#pragma once
// The trainer's side of a worker group (docs/architecture.md section 5, issue 12): what the
// ranks of one worker exchange through the process-group seam (codistill/dist/). Every rank
// runs the same steps on its own slice of the group's batch (data/feed/batch_loader.hpp);
// rank 0 alone writes (owner file, checkpoints, metrics, log) and evaluates. Each exchange
// below is one collective that every rank enters at the same point of its run, so a
// rank that dies or hangs shows as a CollectiveTimeout on the others, never as a hang.
// In one process (size 1) every function here returns at once without touching its data.
#include <cstdint>
#include <string>
#include <vector>

#include <spdlog/logger.h>

#include "checkpoint/checkpoint.hpp"
#include "codistill/config/config.hpp"
#include "codistill/dist/process_group.hpp"
#include "codistill/models/model.hpp"
#include "codistill/teachers/teachers.hpp"
#include "kernels/backend.hpp"

namespace codistill {

// group.kind, group.timeout_s and group.bucket_mb as the seam's options.
dist::GroupOptions group_options(const GroupConfig& cfg);

// Phase 6 of a step over a group: sums the arena's gradient block over the ranks, in
// buckets of the group's bucket size. A group that reduces device memory (nccl) takes the
// block where it is, ordered on q's stream (Queue::native_stream); otherwise the block goes
// through the backend's host-visible staging memory (the block itself on the CPU: no copy).
// No division: each rank's loss is already weighted by its share of the group's rows
// (train/step.hpp). Throws std::invalid_argument when a device-memory group's device is
// not the block's (check_group_device).
void all_reduce_gradients(dist::ProcessGroup& group, kernels::Tensor& grads, kernels::Queue& q);

// Throws std::invalid_argument unless `group` can reduce memory of `device`: a group that
// reduces device memory (nccl) needs the model on its own device; a host-memory group
// (single, mpi) takes any (through staging memory where needed).
void check_group_device(const dist::ProcessGroup& group, const kernels::Device& device);

// Phase 6 overlapped with phase 5: the gradient block's buckets (group.bucket_mb, laid out
// as ProcessGroup::all_reduce_sum lays them out) start, last bucket first, as soon as
// backward has finished them (StepHooks::gradients_ready), and each call drives MPI once
// (it progresses only inside its calls); finish() starts the rest and waits for all.
// Element-wise sums do not depend on when a bucket starts, so the result is
// all_reduce_gradients's, bit for bit. Where the block is host memory (the CPU backend)
// the queue is synchronized before a bucket starts; where the group reduces device memory
// (nccl) a bucket starts on the group's stream after the work queued so far on the queue's,
// without the host waiting. Elsewhere (a device block and a host-memory group: mpi on
// CUDA) nothing starts early and finish() is all_reduce_gradients, through staging memory.
class GradientReducer {
 public:
  GradientReducer(dist::ProcessGroup& group, kernels::Tensor& grads, kernels::Queue& q);
  void ready(std::int64_t first);  // elements [first, end) are final
  void finish();
  // Buckets of the last step that started while layers' backward was still to run (what
  // overlapped), and all of them.
  std::size_t started_early() const { return early_; }
  std::size_t buckets() const { return buckets_.size(); }

 private:
  void start_down_to(std::int64_t first);

  dist::ProcessGroup& group_;
  kernels::Tensor& grads_;
  kernels::Queue& q_;
  // How the block reaches the group: host (the block is host memory), device (the group
  // reduces device memory), staged (copied to host staging memory after backward).
  enum class Path { host, device, staged };
  Path path_ = Path::staged;
  std::vector<dist::Bucket> buckets_;
  std::size_t started_ = 0;     // buckets started this step, counted from the last
  std::size_t overlapped_ = 0;  // ... of which before the first layer's backward ended
  std::size_t early_ = 0;       // overlapped_ of the last finished step
};

// Copies rank 0's int64 values to every rank (each passes a vector of the same length).
void broadcast_values(dist::ProcessGroup& group, std::vector<std::int64_t>& values);

// The teachers (peer, step) rank 0 uses at this step, to every rank: rank 0's `mine` in,
// the same list out on every rank. `max` bounds the list (the number of peers); every rank
// passes the same.
std::vector<checkpoint::TeacherStep> share_teacher_steps(dist::ProcessGroup& group,
                                                         const std::vector<checkpoint::TeacherStep>& mine,
                                                         std::size_t max);

// codistill.share_teachers for this rank (teachers/teacher_sharing.hpp): which ranks share
// a node (a collective, dist::node_layout, wherever the group takes part: 2 ranks or more,
// codistill on, sharing not off), and whether this rank shares, writing (its node's lowest
// rank) or mapping. Where it does not, `why` says why ("" where it does); the run goes on
// with private copies.
TeacherSharing plan_teacher_sharing(const Config& c, dist::ProcessGroup& group, const kernels::Device& device,
                                    std::string& why);
// The plan given to `pool`, with a log line saying what this rank does or why it does not.
void start_teacher_sharing(const Config& c, dist::ProcessGroup& group, const kernels::Device& device,
                           TeacherPool& pool, spdlog::logger& log);

// What the ranks agree on after each step: whether any rank was asked to stop (so that all
// stop after the same step), and the group's loss terms (the sum of the ranks' weighted
// terms: the group batch's mean).
struct StepAgreement {
  bool stop = false;
  double loss = 0, ce = 0, distill = 0;
};
StepAgreement agree_after_step(dist::ProcessGroup& group, bool stop, double loss, double ce, double distill);

// group.sync_batchnorm: every BatchNorm of `model` takes its training statistics over the
// group's ranks (float64 all-reduces through `group`). Returns how many layers it set.
// Throws std::invalid_argument when the model's backend has no synchronized batch norm.
int synchronize_batchnorm(dist::ProcessGroup& group, Model& model);

}  // namespace codistill
