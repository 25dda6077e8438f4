#include "checkpoint/async_writer.hpp"

#include <chrono>
#include <utility>

namespace codistill::checkpoint {

std::optional<TeacherWriteOutcome> write_teacher_of(const WriteJob& job, const CheckpointView& view) {
  if (job.teacher_path.empty()) return std::nullopt;
  TeacherWriteOutcome t;
  t.path = job.teacher_path;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    WriteOptions o;  // the checkpoint's injected faults are the checkpoint's
    o.fsync = job.options.fsync;
    t.result = write_teacher(job.teacher_path, view, job.teacher_type, o);
    t.ok = true;
  } catch (const std::exception& e) {
    t.error = e.what();
  }
  t.write_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

AsyncWriter::AsyncWriter() : thread_([this] { run(); }) {}

AsyncWriter::~AsyncWriter() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();  // run() writes a job already handed over before it returns
}

bool AsyncWriter::busy() const {
  std::lock_guard lock(mu_);
  return writing_ || job_.has_value();
}

bool AsyncWriter::submit(WriteJob job, bool wait_if_busy) {
  std::unique_lock lock(mu_);
  if (!wait_if_busy && (writing_ || job_)) return false;
  cv_.wait(lock, [this] { return !writing_ && !job_; });
  job_ = std::move(job);
  cv_.notify_all();
  return true;
}

std::vector<WriteOutcome> AsyncWriter::poll() {
  std::lock_guard lock(mu_);
  return std::exchange(done_, {});
}

std::vector<WriteOutcome> AsyncWriter::wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return !writing_ && !job_; });
  return std::exchange(done_, {});
}

void AsyncWriter::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || job_; });
    if (!job_) return;  // stopping, nothing left to write
    WriteJob job = std::move(*job_);
    job_.reset();
    writing_ = true;
    lock.unlock();

    WriteOutcome out;
    out.path = job.path;
    out.step = job.snapshot.meta.step;
    out.teacher = write_teacher_of(job, job.snapshot.view());
    auto t0 = std::chrono::steady_clock::now();
    try {
      out.result = write(job.path, job.snapshot.view(), job.options);
      out.ok = true;
    } catch (const std::exception& e) {
      out.error = e.what();
    }
    out.write_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (out.ok && job.after_publish) {
      try {
        job.after_publish(out.result);
      } catch (const std::exception& e) {
        out.after_error = e.what();
      }
    }
    out.snapshot = std::move(job.snapshot);  // back to the caller, who may reuse its buffers
    job = WriteJob();

    lock.lock();
    writing_ = false;
    done_.push_back(std::move(out));
    cv_.notify_all();
  }
}

}  // namespace codistill::checkpoint
