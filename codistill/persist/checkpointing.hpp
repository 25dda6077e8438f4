#pragma once
// A worker's checkpoints during training (DESIGN.md sections 3 and 5): finding the point
// to resume from, publishing every checkpoint.every steps (on a background thread when
// checkpoint.async), retention, and the `checkpoint` metrics events.
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/logger.h>

#include "checkpoint/async_writer.hpp"
#include "checkpoint/store.hpp"
#include "codistill/config/config.hpp"
#include "codistill/persist/metrics.hpp"
#include "codistill/persist/worker_state.hpp"
#include "codistill/optim/optimizer.hpp"

namespace codistill {


class CheckpointManager {
 public:
  // Faults a test injects reach it through checkpoint/fault_seam.hpp only.
  CheckpointManager(const Config& cfg, std::shared_ptr<spdlog::logger> log);
  ~CheckpointManager();

  // Removes temp files of this worker's dead writers, then returns the freshest checkpoint
  // that reads back valid with this model fingerprint, or nullopt when the worker has none.
  // Throws RunDirError (exit 2) under --no-resume when checkpoints exist, and
  // std::runtime_error when checkpoints exist but none of them is valid.
  std::optional<checkpoint::LoadedCheckpoint> find_resume_point(bool resume, const std::string& fingerprint);

  // Metrics go here once the run directory is prepared.
  void set_metrics(MetricsWriter* metrics) { metrics_ = metrics; }

  // Publishes the state at w.step (unless that step is already published); failures are
  // logged and training goes on. Synchronous mode writes before returning. Asynchronous
  // mode returns at once: the caller may run the next step's forward and backward passes
  // (which only read parameters) but must call before_update() before the optimizer
  // changes anything, and after_update() after it. Where the state is host memory (the CPU)
  // nothing is copied: before_update() returns the blocks the next update writes instead
  // (Optimizer::step_into), and the blocks it read, the state of this step, are written
  // out. Elsewhere (a device's host copy) the copy is made on a helper thread behind the
  // passes. With overlap = false (the last step, a stop) the state is copied before save()
  // returns.
  void save(const WorkerState& w, bool overlap = true);
  // Phase 7 of the step: the blocks this step's update must write (an out-of-place update
  // keeps the state of a checkpoint still to be written), or none for an update in place;
  // waits for a copy started by save(), or for the write that holds the blocks to reuse.
  std::optional<OptimizerBlocks> before_update(Optimizer& optimizer);
  // After phase 8: `before`, the blocks an out-of-place update read, go to the writer
  // thread. update_s: the update's seconds; what an out-of-place one took beyond the last
  // update in place counts in the stall. The waits here, in before_update() and in save()
  // are the training stall reported as stall_ms.
  void after_update(std::optional<OptimizerBlocks> before, double update_s);
  // Allocates what the first checkpoint needs ahead of it (async mode): blocks for an
  // out-of-place update, or a snapshot buffer.
  void prepare(const WorkerState& w);
  // Reports finished writes (metrics event, log); never blocks.
  void poll();
  // Copies a pending snapshot, waits for the write in flight and reports it.
  void finish();
  std::int64_t last_saved_step() const { return last_saved_step_; }

 private:
  void report(checkpoint::WriteOutcome& o);
  // Arms the injected write failures a test planned for this step (checkpoint/fault_seam.hpp).
  void arm_faults(std::int64_t step, const std::string& path, const std::string& teacher_path) const;
  // Where the teacher file of a checkpoint at `step` goes; empty when it gets none
  // (checkpoint.teacher_dtype none, or neither a teacher_every-th checkpoint nor the last).
  std::string teacher_path_for(std::int64_t step, bool last) const;
  checkpoint::ElemType teacher_type() const;
  // A pending snapshot that waits for an out-of-place update gets copied here instead,
  // then handed to the writer (save() with one pending, finish()).
  void flush();
  // Hands the pending snapshot (its copy done) to the writer thread.
  void submit(checkpoint::CheckpointData snapshot, double wait_ms);
  // Blocks for an out-of-place update or a copy of the live ones: the spare set (after
  // collect_lent_blocks(), which waits for the write that holds it), else new ones.
  void collect_lent_blocks();
  OptimizerBlocks spare_or_new_blocks(Optimizer& optimizer);
  // Writes on this thread (synchronous mode; an asynchronous one without memory for its
  // out-of-place update) and reports; failures are logged.
  void write_here(const checkpoint::CheckpointView& view, std::int64_t step, const std::string& path,
                  const std::string& teacher_path, std::chrono::steady_clock::time_point t0);
  static std::vector<kernels::Tensor> block_list(const OptimizerBlocks& b);  // values, then slots
  double in_place_update_s() const;  // the median of in_place_update_s_

  const Config& cfg_;
  std::shared_ptr<spdlog::logger> log_;
  MetricsWriter* metrics_ = nullptr;
  checkpoint::RunStore store_;
  std::unique_ptr<checkpoint::AsyncWriter> writer_;
  struct Pending;  // a checkpoint's state not handed to the writer yet
  std::unique_ptr<Pending> pending_;
  // Snapshot buffers back from the writer, reused by the next snapshot: copying into memory
  // already touched costs a memcpy, fresh memory costs page faults as well.
  std::vector<checkpoint::CheckpointData> spare_;
  // Out-of-place updates: blocks lent to a write in flight (by step) until it is reported,
  // then kept (one set) for the next checkpoint's update to write.
  std::map<std::int64_t, OptimizerBlocks> lent_;
  std::vector<OptimizerBlocks> spare_blocks_;
  static constexpr std::size_t kUpdateSamples = 9;
  std::deque<double> in_place_update_s_;  // the last kUpdateSamples updates in place, seconds
  std::map<std::int64_t, double> stall_ms_;  // by step, until the write is reported
  std::int64_t last_saved_step_ = -1;
  int keep_ = 1;  // checkpoint.keep, raised in sync mode (see the constructor)
};

}  // namespace codistill
