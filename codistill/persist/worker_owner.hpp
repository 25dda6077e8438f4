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
// same rules (a takeover killed part-way is cleared by the next claimer); claimers that meet
// a live takeover back off and try again for up to kClaimPatienceSeconds. Both files are
// written to a private draft and hard-linked into place, so neither is ever seen empty, and
// a stale one is removed only if it is still the file judged stale (renamed aside, then
// checked: worker_owner_files.hpp), which on a network file system a plain read-then-unlink
// does not ensure. The file is removed when the owner goes (normal exit, errors, SIGTERM),
// only if it is still this process's.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include <sys/types.h>

namespace codistill {
namespace owner_files {
struct Seen;  // worker_owner_files.hpp (internal)
}

class WorkerOwner {
 public:
  static constexpr int kHeartbeatSeconds = 10;
  static constexpr int kStaleSeconds = 120;
  // How long a claim keeps trying while other processes hold the takeover lock or the
  // owner file keeps changing, before it gives up ("other processes keep claiming it").
  static constexpr int kClaimPatienceSeconds = 5;

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
  enum class TakeOver { claimed, again, wait };
  TakeOver take_over(const owner_files::Seen& owner, const std::string& me, std::string* waited_for);
  void heartbeat_loop();

  std::string path_, token_;
  ino_t ino_ = 0;  // of our owner file: removed at the end only if it is still that file
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread heartbeat_;
};

}  // namespace codistill
