#pragma once
// Publishes checkpoints on a background thread, so that training goes on while one is
// written (config checkpoint.async, checkpoint.on_busy: wait | skip).
//
// The caller takes a snapshot first: values the writer owns until the file is published
// (copies, TensorValue::copy_of; or tensors nobody changes meanwhile, shared, such as the
// blocks an out-of-place optimizer step read: snapshot_sharing, and
// codistill/persist/checkpointing.hpp for what training waits for).
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint.hpp"

namespace codistill::checkpoint {

struct WriteJob {
  std::string path;
  CheckpointData snapshot;
  WriteOptions options;
  // Runs on the writer thread after a successful publish (e.g. RunStore::retain with the
  // step just written as known valid). Its failure is reported, not thrown.
  std::function<void(const WriteResult&)> after_publish;
  // When set, a teacher file of the snapshot (write_teacher: params and buffers stored as
  // teacher_type) is published there first, so that a peer which sees the checkpoint also
  // sees its teacher file (sync mode decides by it). Its failure is reported, and the
  // checkpoint is written all the same.
  std::string teacher_path = {};
  ElemType teacher_type = ElemType::f32;
};

// The teacher file's part of a write.
struct TeacherWriteOutcome {
  std::string path;
  bool ok = false;
  std::string error;
  WriteResult result;
  double write_ms = 0;
};
// Publishes the teacher file a job asks for (nullopt when it asks for none); never throws.
std::optional<TeacherWriteOutcome> write_teacher_of(const WriteJob& job, const CheckpointView& view);

struct WriteOutcome {
  std::string path;
  std::int64_t step = 0;
  bool ok = false;
  std::string error;        // why the write failed (CheckpointError::what())
  std::string after_error;  // why after_publish failed, if it did
  WriteResult result;
  double write_ms = 0;      // time from start of write to publish (of the checkpoint alone)
  std::optional<TeacherWriteOutcome> teacher;  // when the job asked for a teacher file
  CheckpointData snapshot;  // the job's snapshot, handed back for reuse (snapshot_into)
};

class AsyncWriter {
 public:
  AsyncWriter();
  ~AsyncWriter();  // finishes the write in flight (a checkpoint is never abandoned half-way)
  AsyncWriter(const AsyncWriter&) = delete;
  AsyncWriter& operator=(const AsyncWriter&) = delete;

  bool busy() const;
  // Hands a job to the writer thread. If a write is in flight: wait_if_busy blocks until it
  // has finished (on_busy: wait); otherwise the job is dropped and false returned (skip).
  bool submit(WriteJob job, bool wait_if_busy = true);
  // The outcomes of finished writes not collected yet; never blocks.
  std::vector<WriteOutcome> poll();
  // Blocks until no write is in flight, then returns the outcomes not collected yet.
  std::vector<WriteOutcome> wait();

 private:
  void run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<WriteJob> job_;  // handed over, not started yet
  bool writing_ = false, stop_ = false;
  std::vector<WriteOutcome> done_;
  std::thread thread_;
};

}  // namespace codistill::checkpoint
