#pragma once
// The host side of phase 1 of a step (train/step.hpp): a step's training batch drawn from
// the sampler, gathered from the dataset and augmented (data/augment.hpp) into host-visible
// staging memory, optionally one step ahead on a helper thread (data.prefetch).
//
// Prefetching without changing the run. The sampler the step is given stays the one
// authority: each step draws its indices from it on the calling thread, so its position is
// always that of the next step to take — exactly what a checkpoint saves, with or without
// prefetch. The batch of step s + 1 is prepared during step s from a look-ahead copy of the
// sampler set to the real one's position; it is a speculation, used only when step s + 1
// then draws the same indices from the same position into the same staging memory, and
// otherwise (a sampler moved by a resume or a test, another batch) discarded and prepared
// again on the spot. Augmentation is a pure function of (seed, worker, step, row), so the
// prepared bytes are the same on either thread. Prefetch on and off therefore give
// bit-identical runs.
//
// Worker groups (group section, docs/architecture.md section 5): each of a group's R ranks
// holds a sampler over batches of R x B indices (the same seed, the same position on every
// rank) and prepares only its own contiguous slice, rows [rank B, (rank + 1) B), with the
// augmentation keyed by the row in the group's batch. So the group together sees exactly
// the rows, augmented exactly as, one process with batch R x B, and the sampler position a
// checkpoint saves is the same on every rank.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "codistill/data/augment.hpp"
#include "codistill/data/dataset.hpp"
#include "codistill/data/sampler.hpp"
#include "kernels/tensor.hpp"

namespace codistill {

// Whether the loader prepares batches a step ahead, for data.prefetch = auto | true |
// false (anything else: std::invalid_argument naming the valid values). auto: on for a
// device (its step runs on the device while the host prepares the next batch); on the CPU
// only when the step's `threads` leave one of this process's cores free. A CPU step's
// threads keep every core busy, and a helper thread there takes time from them rather than
// from idle time: fmnist_mlp at two threads on two cores waited 30 us per step for the
// helper's batch, and got it in 17 us gathered inline on the step's two threads.
bool prefetch_batches(const std::string& setting, const kernels::Device& device, int threads);

// One batch's host-visible inputs, as K equal micro-batches.
struct HostBatch {
  std::vector<kernels::Tensor> x;       // CPU float32 [rows, C, H, W] each (staging memory)
  std::vector<kernels::Tensor> labels;  // CPU int32 [rows] each
  std::vector<std::int64_t> rows;       // rows not ignored (label != -1) per micro-batch
  std::int64_t group_rows = 0;          // rows not ignored in the whole group's batch (all ranks)
};

// Which slice of the group's batch this process trains on (one process: rank 0 of 1).
struct RankSlice {
  int rank = 0;
  int ranks = 1;
};

class BatchLoader {
 public:
  // Keeps a reference to `train`, which must outlive the loader.
  // The sampler handed to load() draws the group's batch (ranks x this rank's rows).
  BatchLoader(const data::Dataset& train, data::AugmentOptions augment, bool prefetch, RankSlice slice = {});
  ~BatchLoader();  // waits for the helper thread's batch in flight, then stops it
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Fills `into` with the batch of step `step` (1-based), advancing `sampler` by one batch.
  // With prefetch on and `next` given, then starts preparing step + 1's batch into `next`
  // on the helper thread; the caller must not touch `next`'s tensors until it passes
  // `next` as `into` (or destroys the loader: a loader must go before the batches it
  // fills), and must have finished with whatever they held before (on a device: the
  // copies out of them are done).
  void load(std::int64_t step, data::BatchSampler& sampler, HostBatch& into, HostBatch* next);

  bool prefetching() const { return prefetch_; }
  // Batches taken from the helper thread / prepared on the calling thread (for tests).
  std::int64_t prefetched() const { return prefetched_; }
  std::int64_t prepared_inline() const { return inline_; }

 private:
  struct Job {
    std::int64_t step = 0;
    data::SamplerPosition from;  // the sampler position the indices were drawn at
    std::vector<std::int64_t> indices;
    HostBatch* target = nullptr;
  };

  // Gathers this rank's slice of the group batch's indices into b's micro-batches and
  // augments them (either thread).
  void prepare(std::int64_t step, const std::vector<std::int64_t>& indices, HostBatch& b,
               std::vector<std::int32_t>& label_rows,
               bool parallel) const;
  // Waits for the job in flight, if any; returns it with its failure (nullptr: none).
  std::optional<Job> finish_job(std::exception_ptr& failure);
  void helper_main();

  const data::Dataset& train_;
  data::AugmentOptions augment_;
  bool prefetch_;
  RankSlice slice_;
  std::unique_ptr<data::BatchSampler> ahead_;  // look-ahead copy of the step's sampler
  const data::BatchSampler* ahead_source_ = nullptr;  // the sampler it copies
  std::vector<std::int64_t> indices_;
  std::vector<std::int32_t> label_rows_;         // the calling thread's scratch
  std::vector<std::int32_t> helper_label_rows_;  // the helper thread's scratch
  std::int64_t prefetched_ = 0, inline_ = 0;

  // The helper thread: one job at a time, handed over under mu_.
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Job> job_;   // set by load(), taken by the helper
  bool busy_ = false;        // a job is queued or running
  bool stop_ = false;
  std::exception_ptr job_failure_;
  std::optional<Job> done_;  // the last job, once finished
  std::thread helper_;
};

}  // namespace codistill
