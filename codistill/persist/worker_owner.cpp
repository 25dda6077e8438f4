#include "codistill/persist/worker_owner.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "codistill/persist/run_dir.hpp"

namespace codistill {
namespace {

std::string host_name() {
  char buf[256] = "";
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

// The name of this process's private draft of `path` (see create_exclusive).
std::string draft_name(const std::string& path, const std::string& host, long pid) {
  return path + "." + host + "." + std::to_string(pid) + ".claim";
}

// Creates path holding text, failing if it exists: false on EEXIST; throws on other errors.
// The text goes to a private draft first, which is then hard-linked to path (atomic, and
// exclusive on NFS too): a process killed part-way never leaves an empty or torn owner
// file that would look like a live claim. A draft a killed process left behind is removed
// by remove_dead_drafts.
bool create_exclusive(const std::string& path, const std::string& text, const std::string& host) {
  const std::string draft = draft_name(path, host, static_cast<long>(::getpid()));
  const int fd = ::open(draft.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw RunDirError("cannot create " + draft + ": " + std::strerror(errno));
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  int err = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(draft.c_str());
    throw RunDirError("cannot write " + draft + ": " + std::strerror(err));
  }
  const bool linked = ::link(draft.c_str(), path.c_str()) == 0;
  err = errno;
  ::unlink(draft.c_str());
  if (linked) return true;
  if (err == EEXIST) return false;
  throw RunDirError("cannot create " + path + ": " + std::strerror(err));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

double age_seconds(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return std::difftime(std::time(nullptr), st.st_mtime);
}

// When process pid started, in unix seconds (from /proc), or -1 if unknown.
long long process_start_unix(long pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');  // the command may contain spaces and parentheses
  if (paren == std::string::npos) return -1;
  std::istringstream fields(text.substr(paren + 2));
  std::string f;
  unsigned long long start_ticks = 0;
  for (int i = 3; i <= 22 && fields >> f; ++i)
    if (i == 22) start_ticks = std::stoull(f);
  std::ifstream proc_stat("/proc/stat");
  long long boot = -1;
  for (std::string key; proc_stat >> key;)
    if (key == "btime") {
      proc_stat >> boot;
      break;
    }
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (boot < 0 || hz <= 0 || start_ticks == 0) return -1;
  return boot + static_cast<long long>(start_ticks / static_cast<unsigned long long>(hz));
}

// A process that has exited but not been reaped yet (state Z or X in /proc): kill(pid, 0)
// still finds it, but it holds nothing. A rank of a worker group killed with its job is one
// for a moment, until init reaps it, just when the group is restarted.
bool exited(long pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && (text[paren + 2] == 'Z' || text[paren + 2] == 'X');
}

// The holder still runs: its pid exists and (where /proc says) started no later than the
// owner file claims, so a recycled pid of an unrelated later process does not count.
bool holder_alive(long pid, long long started_unix) {
  if (pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  if (exited(pid)) return false;
  const long long start = process_start_unix(pid);
  return start < 0 || started_unix <= 0 || start <= started_unix + 2;
}

WorkerOwner::Holder parse(const std::string& text, double age) {
  WorkerOwner::Holder h;
  h.heartbeat_age_s = age;
  try {
    const auto j = nlohmann::json::parse(text);
    h.host = j.value("host", "");
    h.pid = j.value("pid", 0L);
    h.started_unix = j.value("started_unix", 0LL);
  } catch (const std::exception&) {
    // A torn or foreign file: no holder to name; judged by its age alone.
  }
  return h;
}

}  // namespace

WorkerOwner::WorkerOwner(const std::string& worker_dir) : path_(worker_dir + "/owner") {
  const nlohmann::json j = {{"host", host_name()},
                            {"pid", static_cast<long>(::getpid())},
                            {"started_unix", static_cast<long long>(std::time(nullptr))}};
  token_ = j.dump() + "\n";
  claim();
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
}

namespace {

// Drafts (see create_exclusive) this host's killed processes left beside path.
void remove_dead_drafts(const std::string& path, const std::string& host) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  std::error_code ec;
  for (const std::string& base : {p.filename().string() + ".", p.filename().string() + ".takeover."}) {
    const std::string prefix = base + host + ".";
    for (const auto& e : fs::directory_iterator(p.parent_path(), ec)) {
      const std::string name = e.path().filename().string();
      if (name.size() <= prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0 ||
          name.compare(name.size() - 6, 6, ".claim") != 0)
        continue;
      const std::string pid = name.substr(prefix.size(), name.size() - 6 - prefix.size());
      if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
      const long n = std::stol(pid);
      if (n != static_cast<long>(::getpid()) && !holder_alive(n, 0)) fs::remove(e.path(), ec);
    }
  }
}

}  // namespace

// An owner or takeover file is stale when its writer is gone: on this host, its pid no
// longer runs; on another, its modification time is older than kStaleSeconds.
bool WorkerOwner::stale(const Holder& h, const std::string& me) {
  return h.host == me ? !holder_alive(h.pid, h.started_unix) : h.heartbeat_age_s > kStaleSeconds;
}

void WorkerOwner::claim() {
  const std::string me = host_name();
  remove_dead_drafts(path_, me);
  // Each round either claims the file or clears one stale obstacle (the owner or a
  // takeover lock whose writer died, e.g. killed part-way through its own takeover); a
  // live holder ends it with an error. The bound only stops a livelock of many claimers.
  for (int attempt = 0; attempt < 8; ++attempt) {
    if (create_exclusive(path_, token_, me)) return;
    const std::string text = read_file(path_);
    const double age = age_seconds(path_);
    if (age < 0) continue;  // removed meanwhile: try again
    const Holder h = parse(text, age);
    if (!stale(h, me)) {
      std::ostringstream msg;
      msg << "worker directory " << path_.substr(0, path_.size() - 6) << " is held by "
          << (h.host.empty() ? std::string("an unknown process") : "host " + h.host + " pid " + std::to_string(h.pid))
          << " (its owner file " << path_ << ", heartbeat " << static_cast<long>(age)
          << " s ago): the same worker is already training. Stop that process first; an owner "
             "on another host that stops its heartbeat is taken over after "
          << kStaleSeconds << " s";
      throw RunDirError(msg.str());
    }
    // Stale: take over, one process at a time.
    const std::string lock = path_ + ".takeover";
    if (!create_exclusive(lock, token_, me)) {
      const std::string lock_text = read_file(lock);
      const double lock_age = age_seconds(lock);
      // A takeover whose process died (kill -9 between taking the lock and releasing it)
      // is cleared now, not after kStaleSeconds: a restarted worker must not wait for it.
      if (lock_age >= 0 && stale(parse(lock_text, lock_age), me) && read_file(lock) == lock_text)
        ::unlink(lock.c_str());
      continue;
    }
    if (read_file(path_) == text) ::unlink(path_.c_str());  // still the stale owner
    const bool mine = create_exclusive(path_, token_, me);
    ::unlink(lock.c_str());
    if (mine) return;
  }
  throw RunDirError("cannot claim " + path_ + ": other processes keep claiming it");
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
  if (read_file(path_) == token_) ::unlink(path_.c_str());
}

}  // namespace codistill
