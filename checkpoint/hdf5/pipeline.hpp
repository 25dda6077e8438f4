#pragma once
// A two-stage pipeline for chunk I/O. INTERNAL to checkpoint/*.cpp.
//
// HDF5 calls stay on the caller's thread; the CPU work on each chunk (staging copy,
// fletcher32, digest, finite check) runs on one helper thread, so that the two overlap:
//   write: helper prepares chunk k+1 while the caller hands chunk k to H5Dwrite_chunk;
//   read:  caller reads chunk k+1 with H5Dread_chunk while the helper checks chunk k.
// Tasks flow through a bounded queue, so at most `depth` chunks are in flight. Without a
// helper (small checkpoints) the stage function runs inline at push().
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace codistill::checkpoint {

template <class Task>
class Pipeline {
 public:
  // `stage` runs on the helper (or inline) for each task, in push order.
  Pipeline(std::function<void(Task&)> stage, bool threaded, std::size_t depth = 3)
      : stage_(std::move(stage)), depth_(depth) {
    if (threaded) helper_ = std::thread([this] { run(); });
  }
  ~Pipeline() { stop(true); }
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Queues a task (blocks while `depth` are waiting). Rethrows a helper failure.
  void push(Task t) {
    if (!helper_.joinable()) return stage_(t);
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return queue_.size() < depth_ || error_; });
    rethrow_locked();
    queue_.push_back(std::move(t));
    cv_.notify_all();
  }
  // Waits until every task has been staged; rethrows a helper failure.
  void drain() {
    if (!helper_.joinable()) return;
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return (queue_.empty() && !busy_) || error_; });
    rethrow_locked();
  }
  // Drains and joins the helper (or, with discard, drops what is queued and joins).
  void stop(bool discard = false) {
    if (!helper_.joinable()) return;
    {
      std::lock_guard lock(mu_);
      if (discard) queue_.clear();
      stop_ = true;
    }
    cv_.notify_all();
    helper_.join();
    if (!discard) {
      std::lock_guard lock(mu_);
      rethrow_locked();
    }
  }

 private:
  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty() || error_) return;
      Task t = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      cv_.notify_all();
      lock.unlock();
      std::exception_ptr e;
      try {
        stage_(t);
      } catch (...) {
        e = std::current_exception();
      }
      lock.lock();
      busy_ = false;
      if (e && !error_) error_ = e;
      cv_.notify_all();
    }
  }
  void rethrow_locked() {
    if (error_) std::rethrow_exception(error_);
  }

  std::function<void(Task&)> stage_;
  std::size_t depth_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread helper_;
};

}  // namespace codistill::checkpoint
