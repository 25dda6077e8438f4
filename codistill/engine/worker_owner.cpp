#include "codistill/engine/worker_owner.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "codistill/engine/run_dir.hpp"

namespace codistill {
namespace {

std::string host_name() {
  char buf[256] = "";
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

// Creates path with text, failing if it exists. False on EEXIST; throws on other errors.
bool create_exclusive(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST) return false;
    throw RunDirError("cannot create " + path + ": " + std::strerror(errno));
  }
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    throw RunDirError("cannot write " + path + ": " + std::strerror(err));
  }
  return true;
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

// The holder still runs: its pid exists and (where /proc says) started no later than the
// owner file claims, so a recycled pid of an unrelated later process does not count.
bool holder_alive(long pid, long long started_unix) {
  if (pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
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

void WorkerOwner::claim() {
  const std::string me = host_name();
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (create_exclusive(path_, token_)) return;
    const std::string text = read_file(path_);
    const double age = age_seconds(path_);
    if (age < 0) continue;  // removed meanwhile: try again
    const Holder h = parse(text, age);
    const bool stale = h.host == me ? !holder_alive(h.pid, h.started_unix) : age > kStaleSeconds;
    if (!stale) {
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
    if (!create_exclusive(lock, token_)) {
      if (age_seconds(lock) > kStaleSeconds) ::unlink(lock.c_str());  // a crashed takeover's
      continue;
    }
    if (read_file(path_) == text) ::unlink(path_.c_str());  // still the stale owner
    const bool mine = create_exclusive(path_, token_);
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
