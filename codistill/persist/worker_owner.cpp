#include "codistill/persist/worker_owner.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "codistill/persist/run_dir.hpp"
#include "codistill/persist/worker_owner_files.hpp"

namespace codistill {
namespace {

using owner_files::Seen;

std::string host_name() {
  char buf[256] = "";
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

WorkerOwner::Holder parse(const Seen& seen) {
  WorkerOwner::Holder h;
  h.heartbeat_age_s = seen.age_s;
  try {
    const auto j = nlohmann::json::parse(seen.text);
    h.host = j.value("host", "");
    h.pid = j.value("pid", 0L);
    h.started_unix = j.value("started_unix", 0LL);
  } catch (const std::exception&) {
    // A torn or foreign file: no holder to name; judged by its age alone.
  }
  return h;
}

std::string describe(const WorkerOwner::Holder& h) {
  return h.host.empty() ? std::string("an unknown process") : "host " + h.host + " pid " + std::to_string(h.pid);
}

// Waits between rounds of a contended claim: 10 ms doubling to 320 ms, each drawn at random
// between half and all of it, so that claimers on several nodes fall out of step (on a
// network file system a round takes milliseconds, and claimers in lockstep kept finding
// each other's takeover lock until they gave up).
class Backoff {
 public:
  Backoff() : rng_(static_cast<unsigned>(::getpid()) ^ static_cast<unsigned>(std::time(nullptr))) {}
  void wait() {
    std::uniform_int_distribution<int> draw(ms_ / 2, ms_);
    std::this_thread::sleep_for(std::chrono::milliseconds(draw(rng_)));
    ms_ = std::min(ms_ * 2, 320);
  }

 private:
  std::minstd_rand rng_;
  int ms_ = 10;
};

}  // namespace

WorkerOwner::WorkerOwner(const std::string& worker_dir) : path_(worker_dir + "/owner") {
  const nlohmann::json j = {{"host", host_name()},
                            {"pid", static_cast<long>(::getpid())},
                            {"started_unix", static_cast<long long>(std::time(nullptr))}};
  token_ = j.dump() + "\n";
  claim();
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
}

// An owner or takeover file is stale when its writer is gone: on this host, its pid no
// longer runs; on another, its modification time is older than kStaleSeconds.
bool WorkerOwner::stale(const Holder& h, const std::string& me) {
  return h.host == me ? !owner_files::process_alive(h.pid, h.started_unix) : h.heartbeat_age_s > kStaleSeconds;
}

void WorkerOwner::claim() {
  const std::string me = host_name();
  owner_files::remove_dead_leftovers(path_, me);
  // Each round claims the free name, or meets a live holder (an error), or a stale one,
  // which is replaced under the takeover lock. Rounds that found the name in flux or a
  // live takeover under way wait a little (Backoff); the patience bounds a livelock.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kClaimPatienceSeconds);
  Backoff backoff;
  std::string waited_for = "the owner file kept changing";
  for (;;) {
    if (owner_files::create_exclusive(path_, token_, me, &ino_)) return;
    TakeOver t = TakeOver::wait;  // the name taken but gone when looked at: in flux
    const Seen owner = owner_files::look(path_);
    if (owner.found) {
      const Holder h = parse(owner);
      if (!stale(h, me)) {
        std::ostringstream msg;
        msg << "worker directory " << path_.substr(0, path_.size() - 6) << " is held by " << describe(h)
            << " (its owner file " << path_ << ", heartbeat " << static_cast<long>(owner.age_s)
            << " s ago): the same worker is already training. Stop that process first; an owner "
               "on another host that stops its heartbeat is taken over after "
            << kStaleSeconds << " s";
        throw RunDirError(msg.str());
      }
      t = take_over(owner, me, &waited_for);
      if (t == TakeOver::claimed) return;
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw RunDirError("cannot claim " + path_ + ": other processes keep claiming it (" + waited_for + ", for " +
                        std::to_string(kClaimPatienceSeconds) + " s)");
    if (t != TakeOver::again) backoff.wait();  // `again`: this round cleared a stale file itself
  }
}

// Replaces the stale owner `owner` with this process's, under the takeover lock.
WorkerOwner::TakeOver WorkerOwner::take_over(const Seen& owner, const std::string& me, std::string* waited_for) {
  const std::string lock = path_ + ".takeover";
  ino_t lock_ino = 0;
  if (!owner_files::create_exclusive(lock, token_, me, &lock_ino)) {
    const Seen held = owner_files::look(lock);
    if (!held.found) return TakeOver::wait;
    const Holder h = parse(held);
    // A takeover whose process died (kill -9 between taking the lock and releasing it) is
    // cleared now, not after kStaleSeconds: a restarted worker must not wait for it.
    if (stale(h, me) && owner_files::remove_if_same(lock, held, me)) return TakeOver::again;
    *waited_for = "a takeover by " + describe(h) + " under way (" + lock + ")";
    return TakeOver::wait;
  }
  const Seen ours{true, lock_ino, 0, token_};
  bool mine = false;
  try {
    owner_files::remove_if_same(path_, owner, me);  // false: replaced meanwhile; the next round looks again
    mine = owner_files::create_exclusive(path_, token_, me, &ino_);
  } catch (...) {
    owner_files::remove_if_same(lock, ours, me);  // others must not wait on a lock of a failed takeover
    throw;
  }
  owner_files::remove_if_same(lock, ours, me);
  // Not mine: the owner file was another claim already. On GlusterFS a client may go on
  // opening a replaced file's old version by its name for up to its entry timeout (1 s), so
  // the next round waits before it looks again.
  return mine ? TakeOver::claimed : TakeOver::wait;
}

void WorkerOwner::heartbeat_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, std::chrono::seconds(kHeartbeatSeconds), [this] { return stop_; })) {
    // The modification time is the heartbeat; a failure (a full disk does not matter here,
    // an unreachable file server does) is retried at the next beat.
    ::utimensat(AT_FDCWD, path_.c_str(), nullptr, 0);
  }
}

WorkerOwner::~WorkerOwner() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  try {
    owner_files::remove_if_same(path_, owner_files::Seen{true, ino_, 0, token_}, host_name());  // only if still ours
  } catch (const std::exception&) {
    // A destructor must not throw; a file left behind is stale once this process is gone.
  }
}

}  // namespace codistill
