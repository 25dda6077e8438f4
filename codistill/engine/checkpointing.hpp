#pragma once
// A worker's checkpoints during training (DESIGN.md sections 3 and 5): finding the point
// to resume from, publishing every checkpoint.every steps (on a background thread when
// checkpoint.async), retention, and the `checkpoint` metrics events.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/logger.h>

#include "checkpoint/async_writer.hpp"
#include "checkpoint/store.hpp"
#include "codistill/config/config.hpp"
#include "codistill/engine/faults.hpp"
#include "codistill/engine/metrics.hpp"
#include "codistill/engine/worker_state.hpp"

namespace codistill {


class CheckpointManager {
 public:
  // faults: injected for process-level tests (TrainOptions::checkpoint_faults).
  CheckpointManager(const Config& cfg, std::shared_ptr<spdlog::logger> log, CheckpointFaults faults = {});
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
  // mode starts copying the state on a helper thread and returns at once: the caller may
  // run the next step's forward and backward passes (which only read parameters) but must
  // call before_update() before the optimizer changes anything. With overlap = false
  // (the last step, a stop) the copy is finished before save() returns.
  void save(const WorkerState& w, bool overlap = true);
  // Waits for a copy started by save() and hands it to the writer thread. The time spent
  // waiting here and in save() is the training stall reported as stall_ms.
  void before_update();
  // Allocates a snapshot buffer for this state ahead of the first checkpoint (async mode).
  void prepare(const WorkerState& w);
  // Reports finished writes (metrics event, log); never blocks.
  void poll();
  // Waits for the write in flight and reports it.
  void finish();
  std::int64_t last_saved_step() const { return last_saved_step_; }

 private:
  void report(checkpoint::WriteOutcome& o);
  checkpoint::WriteOptions write_options_for(std::int64_t step) const;

  const Config& cfg_;
  std::shared_ptr<spdlog::logger> log_;
  MetricsWriter* metrics_ = nullptr;
  checkpoint::RunStore store_;
  std::unique_ptr<checkpoint::AsyncWriter> writer_;
  struct Pending;  // a snapshot being copied behind the next step's passes
  std::unique_ptr<Pending> pending_;
  // Snapshot buffers back from the writer, reused by the next snapshot: copying into memory
  // already touched costs a memcpy, fresh memory costs page faults as well.
  std::vector<checkpoint::CheckpointData> spare_;
  std::map<std::int64_t, double> stall_ms_;  // by step, until the write is reported
  std::int64_t last_saved_step_ = -1;
  int keep_ = 1;  // checkpoint.keep, raised in sync mode (see the constructor)
  CheckpointFaults faults_;
};

}  // namespace codistill
