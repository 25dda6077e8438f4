#pragma once
// The trainer's side of a worker group (docs/architecture.md section 5, issue 12): what the
// ranks of one worker exchange through the process-group seam (codistill/dist/). Every rank
// runs the same steps on its own slice of the group's batch (engine/batch_loader.hpp);
// rank 0 alone writes (owner file, checkpoints, metrics, log) and evaluates. Each exchange
// below is one collective that every rank enters at the same point of its run, so a
// rank that dies or hangs shows as a CollectiveTimeout on the others, never as a hang.
// In one process (size 1) every function here returns at once without touching its data.
#include <cstdint>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "codistill/config/config.hpp"
#include "codistill/dist/process_group.hpp"
#include "codistill/models/model.hpp"
#include "kernels/backend.hpp"

namespace codistill {

// group.kind, group.timeout_s and group.bucket_mb as the seam's options.
dist::GroupOptions group_options(const GroupConfig& cfg);

// Phase 6 of a step over a group: sums the arena's gradient block over the ranks, in
// buckets of the group's bucket size. The block goes through the backend's host-visible
// staging memory (the block itself on the CPU: no copy). No division: each rank's loss is
// already weighted by its share of the group's rows (engine/step.hpp).
void all_reduce_gradients(dist::ProcessGroup& group, kernels::Tensor& grads, kernels::Queue& q);

// Copies rank 0's int64 values to every rank (each passes a vector of the same length).
void broadcast_values(dist::ProcessGroup& group, std::vector<std::int64_t>& values);

// The teachers (peer, step) rank 0 uses at this step, to every rank: rank 0's `mine` in,
// the same list out on every rank. `max` bounds the list (the number of peers); every rank
// passes the same.
std::vector<checkpoint::TeacherStep> share_teacher_steps(dist::ProcessGroup& group,
                                                         const std::vector<checkpoint::TeacherStep>& mine,
                                                         std::size_t max);

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
