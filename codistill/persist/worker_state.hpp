#pragma once
// The bridge between one worker's training state and checkpoint format v1 (DESIGN.md
// section 5): what goes into /params, /optimizer and /state, and how it comes back.
//   /params/<module path>/<param>     model parameters
//   /buffers/<module path>/<buffer>   non-trainable buffers (e.g. running statistics)
//   /optimizer/<layer>/<param>/<slot> optimizer slots (momentum, adam_m, adam_v)
//   /state/optimizer/step             int64[1]  optimizer steps taken
//   /state/sampler/<name>             int64[n]  the batch source's state (batch_source.hpp):
//     images: position int64[2] (epoch, cursor of the sampler), shard_size int64[1]
//             (examples in this worker's shard)
//     text:   shard_size int64[1] (tokens of this worker's stream, end-of-document tokens
//             included), context int64[1] (data.context); the windows are a pure function
//             of the step, so nothing else
//   /state/rng/<layer>                uint64[4] each dropout layer's generator
//   /state/data/normalization         float64[2] shift, scale applied to raw inputs
// The learning-rate schedule is a pure function of the step, so it needs no state.
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "codistill/data/dataset.hpp"
#include "codistill/data/sampler.hpp"
#include "codistill/data/feed/batch_source.hpp"
#include "codistill/models/model.hpp"
#include "codistill/optim/optimizer.hpp"
#include "codistill/util/rng.hpp"

namespace codistill {

// Borrowed pointers to a worker's live state.
struct WorkerState {
  Model* model = nullptr;
  Optimizer* optimizer = nullptr;
  BatchSource* source = nullptr;  // the training batches (its /state/sampler entries)
  data::Normalization normalization;
  int worker = 0;
  std::int64_t step = 0;
  std::int64_t examples_seen = 0;
  std::string model_yaml;
  std::string config_yaml;
  std::vector<checkpoint::TeacherStep> teacher_steps;
};

// A view of the state plus the small state arrays it points into. The checkpoint format
// reads host memory: each block (parameter arena values, buffers, optimizer slots) is
// seen through its backend's staging tensor (Backend::staging_for) — on the CPU the block
// itself, borrowed and valid until the model or optimizer next change (CheckpointManager
// then has the next update write other blocks); on a device a host copy owned by the view,
// taken on the model's queue at the step, which CheckpointManager copies on a helper thread.
struct StateView {
  checkpoint::CheckpointView view;
  std::deque<std::vector<std::int64_t>> i64;
  std::deque<std::vector<std::uint64_t>> u64;
  std::deque<std::vector<double>> f64;
  std::deque<kernels::Tensor> host;  // host views of the blocks (copies of device ones)
  // The parameter and slot blocks are borrowed (host memory: the live blocks themselves),
  // not copies: valid until the optimizer's next step, and kept by an out-of-place one.
  bool borrows_live_blocks = false;
};
StateView make_state_view(const WorkerState& w);

// Puts a checkpoint's content back into the live state: every parameter, buffer, optimizer
// slot, the optimizer step, the batch source's state and the dropout generators (on whatever
// device the model is; the copies have landed when this returns). A checkpoint without
// /buffers (written before buffers existed, or by a model without any) leaves buffers as
// they are only when the model has none; otherwise it is an error naming the buffer. Throws
// std::runtime_error naming the checkpoint entry that is missing or has the wrong shape.
void restore_state(WorkerState& w, const checkpoint::CheckpointData& data);

// Only the parameters and buffers of a checkpoint into `model` (by path and shape; the
// model's optimizer, step and data position are left alone): fine-tuning (model.init_from).
// Throws std::runtime_error naming the entry that is missing or has the wrong shape.
void copy_model_state(Model& model, const checkpoint::CheckpointData& data);

// Builds a model from a model section (build_model's signature); TrainOptions::model_factory.
using ModelFactory = std::function<Model(const ModelConfig&, Rng&)>;

// Offline use (codistill-inspect, teachers): the model rebuilt from the checkpoint's own
// `model` attribute, with its parameters and buffers loaded (on the CPU). `factory` unset:
// build_model.
Model model_from_checkpoint(const checkpoint::CheckpointData& data, const ModelFactory& factory = {});
// The input normalization stored with a checkpoint ("none" when absent).
data::Normalization normalization_from_checkpoint(const checkpoint::CheckpointData& data);

}  // namespace codistill
