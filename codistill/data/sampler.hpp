#pragma once
// Per-worker sharding and shuffling of the training split (DESIGN.md section 8,
// data.shard), and in-order iteration of the test split.
//
// Shard modes, for worker w of W with run seed S:
//   disjoint: a permutation of all N examples drawn from S alone (the same on every
//             worker) is cut into W contiguous parts of N/W examples (the first N % W
//             parts get one more); worker w uses part w. The parts are pairwise
//             disjoint and cover the training set exactly once.
//   full:     every worker uses all N examples, each in its own order (the shuffle
//             stream depends on w).
//   same:     every worker uses all N examples in the same order (the shuffle stream
//             does not depend on w): the "same data" baseline of the paper.
// Epoch e visits the shard in an order drawn from stream (S, worker-or-shared, e),
// starting each time from the shard's sorted indices. The order of an epoch is thus a
// pure function of (S, mode, w, W, e): the sampler's position is just (epoch, cursor),
// no generator state, and restoring it continues bit-exactly.
#include <cstdint>
#include <string_view>
#include <vector>

#include "codistill/data/data_options.hpp"
#include "codistill/data/dataset.hpp"
#include "kernels/tensor.hpp"

namespace codistill::data {

// none: a worker's own data (a path naming {worker}, worker_paths.hpp), not split again;
// it samples as full does, in the worker's own order.
enum class ShardMode { disjoint, full, same, none };

// "disjoint" | "full" | "same" | "none", and "auto" (what for_worker did not resolve: no
// path names the worker) as disjoint; otherwise std::invalid_argument listing the names.
ShardMode parse_shard_mode(std::string_view name);
const char* shard_mode_name(ShardMode mode);

struct SamplerOptions {
  std::int64_t batch_size = 128;
  ShardMode mode = ShardMode::disjoint;
  std::uint64_t seed = 1;  // the run seed
  int worker = 0;
  int workers = 1;
};


// Everything a checkpoint must hold to resume the sampler bit-exactly.
struct SamplerPosition {
  std::int64_t epoch = 0;   // the epoch in progress, from 0
  std::int64_t cursor = 0;  // examples of that epoch already served, in [0, shard size)
  bool operator==(const SamplerPosition&) const = default;
};

class BatchSampler {
 public:
  // Keeps a pointer to `train`, which must outlive the sampler. Throws
  // std::invalid_argument for batch_size < 1, workers < 1, worker outside [0, workers),
  // a disjoint split with fewer examples than workers, or a batch larger than the shard
  // (it would have to repeat examples within one batch).
  BatchSampler(const Dataset& train, const SamplerOptions& options);

  // Fills images (CPU float32 [batch_size, C, H, W], allocated by the caller) and labels
  // (resized to batch_size) with the next batch_size examples of the shard. Batches are
  // always full: when the epoch runs out in the middle of a batch, the batch is
  // completed from the start of the next epoch's order (so an epoch boundary may fall
  // inside a batch, and each epoch still visits every shard example exactly once).
  void next_batch(kernels::Tensor& images, std::vector<std::int32_t>& labels);
  // Advances exactly like next_batch, but only reports the examples' indices in the
  // training split (for tests and for callers that gather themselves).
  void next_indices(std::vector<std::int64_t>& indices);

  SamplerPosition position() const { return pos_; }
  // Throws std::invalid_argument unless epoch >= 0 and 0 <= cursor < shard_size().
  void set_position(const SamplerPosition& position);

  const SamplerOptions& options() const { return opt_; }
  std::int64_t batch_size() const { return opt_.batch_size; }
  std::int64_t shard_size() const { return static_cast<std::int64_t>(shard_.size()); }
  // This worker's examples, ascending (indices into the training split).
  const std::vector<std::int64_t>& shard() const { return shard_; }
  // The order in which the current epoch visits the shard.
  const std::vector<std::int64_t>& epoch_order() const { return order_; }

 private:
  void start_epoch(std::int64_t epoch);

  const Dataset* data_;
  SamplerOptions opt_;
  std::vector<std::int64_t> shard_;
  std::vector<std::int64_t> order_;
  std::vector<std::int64_t> scratch_;  // the indices of the batch being filled
  SamplerPosition pos_;
};

// The test split in order, in batches of batch_size (the last one may be short):
//   EvalBatches batches(splits.test, cfg.train.eval_batch_size);
//   kernels::Tensor x; std::vector<std::int32_t> y;
//   while (batches.next(x, y)) { ... }
class EvalBatches {
 public:
  // Keeps a pointer to `data`, which must outlive this object. batch_size >= 1.
  EvalBatches(const Dataset& data, std::int64_t batch_size);

  // Copies the next batch into images and labels and returns true, or returns false
  // once the split is exhausted. images is reallocated as a CPU float32
  // [n, C, H, W] tensor only when its shape differs (the first call and the short
  // last batch); labels is resized to n.
  bool next(kernels::Tensor& images, std::vector<std::int32_t>& labels);
  void reset() { begin_ = 0; }

  std::int64_t num_batches() const;
  std::int64_t batch_size() const { return batch_size_; }

 private:
  const Dataset* data_;
  std::int64_t batch_size_;
  std::int64_t begin_ = 0;
};

}  // namespace codistill::data
