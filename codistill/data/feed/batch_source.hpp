#pragma once
// Where phase 1 of a step (train/step.hpp) gets its batches: one interface, one
// implementation per kind of data, so that the step orders the same phases whatever the
// model reads.
//   images (ImageBatchSource): the BatchSampler's indices gathered and augmented by
//           BatchLoader (prefetch, group slices): float32 [rows, C, H, W], labels [rows];
//   text   (TextBatchSource, data/feed/text_source.hpp): WindowSampler's windows, a pure
//           function of (seed, worker, step): int32 token ids [rows, T], labels [rows * T]
//           = the next token of each position.
// A source fills the host-visible staging tensors the step allocated from its layout; the
// step copies them to the device. In a worker group of R ranks every rank's source draws
// the group's batch of R x B rows and fills only its own slice of B rows, so the group
// trains exactly as one process with batch R x B. The loss rows of a micro-batch are its
// labels (one per image, T per window); the step weights each micro-batch and rank by its
// share of the group's counted label rows.
// What a source needs to resume bit-exactly goes into /state/sampler/* of a checkpoint
// (docs/checkpoint-format.md): the image sampler's epoch and cursor; for text nothing
// but a check that the data did not change (the step is the position).
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "codistill/data/augment.hpp"
#include "codistill/data/dataset.hpp"
#include "codistill/data/sampler.hpp"
#include "codistill/data/feed/batch_loader.hpp"
#include "kernels/tensor.hpp"

namespace codistill {

// One micro-batch as the model takes it: `rows` examples (images or windows).
struct BatchLayout {
  kernels::Shape input;      // with the batch dimension: [rows, C, H, W] or [rows, T]
  kernels::DType input_dtype = kernels::DType::f32;
  std::int64_t labels = 0;   // label rows (= rows of the logits): rows, or rows x T
  std::int64_t classes = 0;  // width of the logits
};

// /state/sampler/<name> entries: int64 arrays.
using SourceState = std::vector<std::pair<std::string, std::vector<std::int64_t>>>;
// Reads /state/sampler/<name> of a checkpoint, which must hold `numel` values; throws
// std::runtime_error naming the entry otherwise.
using SourceStateReader = std::function<std::vector<std::int64_t>(const std::string& name, std::int64_t numel)>;

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // A micro-batch of `rows` rows of this rank.
  virtual BatchLayout layout(std::int64_t rows) const = 0;
  // Fills `into` (micro-batches of staging tensors of layout(rows / K)) with this rank's
  // slice of step `step`'s batch (1-based), and its counted label rows. `next`, when
  // given, holds the buffers of the next step: a source may start preparing them (the
  // caller then leaves them alone until it passes them as `into`).
  virtual void load(std::int64_t step, HostBatch& into, HostBatch* next) = 0;
  // What a checkpoint keeps to resume, and putting it back (throws std::runtime_error
  // when the checkpoint was taken with other data: a shard of another size, ...).
  virtual SourceState checkpoint_state() const = 0;
  virtual void restore(const SourceStateReader& read) = 0;
  // One line for the log: what this worker trains on.
  virtual std::string describe() const = 0;
};

// Images: the existing path (BatchSampler + BatchLoader), unchanged. The sampler (which
// draws the group's R x B indices) is the authority on the position; it must outlive this.
class ImageBatchSource final : public BatchSource {
 public:
  ImageBatchSource(const data::Dataset& train, data::BatchSampler& sampler, data::AugmentOptions augment = {},
                   bool prefetch = false, RankSlice slice = {});
  BatchLayout layout(std::int64_t rows) const override;
  void load(std::int64_t step, HostBatch& into, HostBatch* next) override;
  SourceState checkpoint_state() const override;
  void restore(const SourceStateReader& read) override;
  std::string describe() const override;
  data::BatchSampler& sampler() { return sampler_; }
  const BatchLoader& loader() const { return loader_; }

 private:
  const data::Dataset& train_;
  data::BatchSampler& sampler_;
  // Its helper thread may be writing into the step's staging memory: the step owns its
  // source and destroys it before its buffers.
  BatchLoader loader_;
};

}  // namespace codistill
