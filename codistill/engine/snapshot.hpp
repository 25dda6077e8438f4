#pragma once
// The bridge between one worker's training state and checkpoint format v1 (DESIGN.md
// section 5): what goes into /params, /optimizer and /state, and how it comes back.
//   /params/<layer>/<param>           model parameters
//   /optimizer/<layer>/<param>/<slot> optimizer slots (momentum, adam_m, adam_v)
//   /state/optimizer/step             int64[1]  optimizer steps taken
//   /state/sampler/position           int64[2]  epoch, cursor of the training sampler
//   /state/sampler/shard_size         int64[1]  examples in this worker's shard
//   /state/rng/<layer>                uint64[4] each dropout layer's generator
//   /state/data/normalization         float64[2] shift, scale applied to raw inputs
// The learning-rate schedule is a pure function of the step, so it needs no state.
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "codistill/data/dataset.hpp"
#include "codistill/data/sampler.hpp"
#include "codistill/models/model.hpp"
#include "codistill/optim/optimizer.hpp"

namespace codistill {

// Borrowed pointers to a worker's live state.
struct WorkerState {
  Model* model = nullptr;
  Optimizer* optimizer = nullptr;
  data::BatchSampler* sampler = nullptr;
  data::Normalization normalization;
  int worker = 0;
  std::int64_t step = 0;
  std::int64_t examples_seen = 0;
  std::string model_yaml;
  std::string config_yaml;
  std::vector<checkpoint::TeacherStep> teacher_steps;
};

// A view of the state (borrowing the model's tensors) plus the small state arrays it
// points into. Valid until the model, optimizer or sampler next change.
// A model on CUDA: its stream is synchronized and every parameter and optimizer slot is
// copied to host tensors owned by the view (the checkpoint format reads host memory), so
// such a view stays valid while training goes on. A few MB cost well under a millisecond
// at a step boundary; the helper-thread copy of CheckpointManager then works as on the CPU.
struct StateView {
  checkpoint::CheckpointView view;
  std::deque<std::vector<std::int64_t>> i64;
  std::deque<std::vector<std::uint64_t>> u64;
  std::deque<std::vector<double>> f64;
  std::deque<kernels::Tensor> host;  // host copies of device tensors
};
StateView make_state_view(const WorkerState& w);

// Puts a checkpoint's content back into the live state: every parameter, optimizer slot,
// the optimizer step, the sampler position and the dropout generators (on whatever device
// the model is; a CUDA device is waited for before this returns). Throws
// std::runtime_error naming the checkpoint entry that is missing or has the wrong shape.
void restore_state(WorkerState& w, const checkpoint::CheckpointData& data);

// Offline use (codistill-inspect, teachers): the model rebuilt from the checkpoint's own
// `model` attribute, with its parameters loaded.
Model model_from_checkpoint(const checkpoint::CheckpointData& data);
// The input normalization stored with a checkpoint ("none" when absent).
data::Normalization normalization_from_checkpoint(const checkpoint::CheckpointData& data);

}  // namespace codistill
