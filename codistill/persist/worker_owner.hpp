#pragma once
// One process per worker: RUN_DIR/worker-XXX/owner records who trains the worker (host,
// pid, start time), created exclusively by hard-linking a private draft into place (atomic
// on local file systems and on NFS; no flock, which NFS does not honour everywhere). A second process started
// as the same worker — a requeued cluster job whose first instance still runs — refuses
// (RunDirError: exit 2) naming the host and pid that hold the worker.
//
// The holder refreshes the file's modification time every kHeartbeatSeconds. An owner is
// stale, and taken over, when
//   - it is on this host and its pid is gone (after kill -9, a crash, a reboot), or
//   - it is on another host and its heartbeat is older than kStaleSeconds (a dead node;
//     generous, since hosts' clocks may disagree).
// A takeover is itself serialized by RUN_DIR/worker-XXX/owner.takeover, judged stale by the
// same rules (a takeover killed part-way is cleared by the next claimer). Both files are
// written to a private draft and hard-linked into place, so neither is ever seen empty. The file is removed
// when the owner goes (normal exit, errors, SIGTERM), only if it is still this process's.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace codistill {

class WorkerOwner {
 public:
  static constexpr int kHeartbeatSeconds = 10;
  static constexpr int kStaleSeconds = 120;

  // Claims worker_dir (which must exist) or throws RunDirError naming the holder.
  explicit WorkerOwner(const std::string& worker_dir);
  ~WorkerOwner();  // stops the heartbeat and removes the owner file if it is still ours
  WorkerOwner(const WorkerOwner&) = delete;
  WorkerOwner& operator=(const WorkerOwner&) = delete;

  const std::string& path() const { return path_; }
  // Who holds a worker, as the owner file says; for messages.
  struct Holder {
    std::string host;
    long pid = 0;
    long long started_unix = 0;
    double heartbeat_age_s = 0;
  };

 private:
  static bool stale(const Holder& h, const std::string& this_host);
  void claim();
  void heartbeat_loop();

  std::string path_, token_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread heartbeat_;
};

}  // namespace codistill
