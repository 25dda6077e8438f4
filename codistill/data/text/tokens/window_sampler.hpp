#pragma once
// Per-worker shards of a training token file and the [B, T+1] windows a language model
// trains on (docs/text-data.md, "Shards and batches").
//
// Shards (data.shard, as for images, sampler.hpp):
//   disjoint: the documents are dealt to the W workers balanced by token count: in order of
//             decreasing length (ties: lower document index first), each document goes to
//             the worker with the fewest tokens so far (ties: the lower worker id). Shards
//             are pairwise disjoint, cover every document once, and differ in size by at
//             most the longest document. Needs at least W documents.
//   full:     every worker uses every document, each with its own random windows.
//   same:     every worker uses every document with the same windows (the paper's
//             "same data" baseline).
// A worker's stream is its shard's documents in ascending index order, each followed by
// the end-of-document token.
//
// Windows: at step s, row b of the batch is the T+1 stream tokens starting at a position
// drawn uniformly from [0, L - T - 1] (L = stream length) by the generator of stream
// (seed, worker or shared, s). Inputs are columns 0..T-1, next-token targets columns 1..T.
// The batch of a step is a pure function of (file, seed, mode, worker, workers, step):
// a resumed run needs only its step to continue bit-exactly.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "codistill/data/sampler.hpp"
#include "codistill/data/text/tokens/stream.hpp"
#include "codistill/data/text/tokens/token_file.hpp"

namespace codistill::data::text {

// The documents of worker `worker` of `workers`, ascending. Throws std::invalid_argument
// for workers < 1, a worker outside [0, workers), or (disjoint) fewer documents than workers.
std::vector<std::int64_t> shard_documents(const TokenFile& train, ShardMode mode, int worker, int workers);

struct WindowOptions {
  std::int64_t batch_size = 8;  // B
  std::int64_t context = 256;   // T: a window holds T + 1 tokens
  ShardMode mode = ShardMode::disjoint;
  std::uint64_t seed = 1;       // the run seed
  int worker = 0;
  int workers = 1;
};

class WindowSampler {
 public:
  // Keeps a pointer to `train`, which must outlive the sampler. Throws
  // std::invalid_argument for batch_size < 1, context < 1, a bad worker/workers, or a
  // shard whose stream is shorter than one window (naming both sizes).
  WindowSampler(const TokenFile& train, const WindowOptions& options);
  // Windows of a stream that is already this worker's shard (token shards: shard_files).
  WindowSampler(std::shared_ptr<const TokenStream> stream, const WindowOptions& options);

  // Fills out (batch_size * (context + 1) int32, row-major [B, T+1]) with step's batch.
  // Throws std::invalid_argument for a wrong out size or a negative step.
  void windows(std::int64_t step, std::span<std::int32_t> out) const;
  // The start of each row's window in the stream at this step.
  std::vector<std::int64_t> starts(std::int64_t step) const;

  const WindowOptions& options() const { return opt_; }
  std::int64_t row_tokens() const { return opt_.context + 1; }
  const TokenStream& stream() const { return *stream_; }

 private:
  WindowOptions opt_;
  std::shared_ptr<const TokenStream> stream_;
};

// The held-out split read whole, the same on every worker: the stream of all its
// documents cut into windows of T+1 tokens that start every T tokens, so that each token
// after the first is predicted exactly once; the last L - 1 - T * count() tokens (fewer
// than T) are not evaluated.
class EvalWindows {
 public:
  EvalWindows(const TokenFile& valid, std::int64_t context);
  EvalWindows(std::shared_ptr<const TokenStream> valid, std::int64_t context);
  std::int64_t count() const { return count_; }
  std::int64_t row_tokens() const { return context_ + 1; }
  // Fills out with windows [first, first + out.size() / (T+1)); throws std::out_of_range
  // past count() and std::invalid_argument when out.size() is not a multiple of T+1.
  void windows(std::int64_t first, std::span<std::int32_t> out) const;

 private:
  std::int64_t context_;
  std::shared_ptr<const TokenStream> stream_;
  std::int64_t count_;
};

}  // namespace codistill::data::text
