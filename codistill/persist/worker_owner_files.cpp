#include "codistill/persist/worker_owner_files.hpp"

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

#include "codistill/persist/run_dir.hpp"

namespace codistill::owner_files {
namespace {

bool gone(int err) { return err == ENOENT || err == ESTALE; }

std::string own_name(const std::string& path, const std::string& host, const char* suffix) {
  return path + "." + host + "." + std::to_string(static_cast<long>(::getpid())) + suffix;
}

[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  throw RunDirError(what + " " + path + ": " + std::strerror(err));
}

// Closes on scope exit.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string proc_stat(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// When process pid started, in unix seconds (from /proc), or -1 if unknown.
long long process_start_unix(long pid) {
  const std::string text = proc_stat(pid);
  const auto paren = text.rfind(')');  // the command may contain spaces and parentheses
  if (paren == std::string::npos) return -1;
  std::istringstream fields(text.substr(paren + 2));
  std::string f;
  unsigned long long start_ticks = 0;
  for (int i = 3; i <= 22 && fields >> f; ++i)
    if (i == 22) start_ticks = std::stoull(f);
  std::ifstream stat("/proc/stat");
  long long boot = -1;
  for (std::string key; stat >> key;)
    if (key == "btime") {
      stat >> boot;
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
  const std::string text = proc_stat(pid);
  const auto paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && (text[paren + 2] == 'Z' || text[paren + 2] == 'X');
}

}  // namespace

bool process_alive(long pid, long long started_unix) {
  if (pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  if (exited(pid)) return false;
  const long long start = process_start_unix(pid);
  return start < 0 || started_unix <= 0 || start <= started_unix + 2;
}

Seen look(const std::string& path) {
  Seen s;
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) {
    if (gone(errno)) return s;
    fail("cannot open", path, errno);
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) {
    if (gone(errno)) return s;
    fail("cannot stat", path, errno);
  }
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && gone(errno)) return s;
    if (n < 0) fail("cannot read", path, errno);
    if (n == 0) break;
    s.text.append(buf, static_cast<std::size_t>(n));
  }
  s.found = true;
  s.ino = st.st_ino;
  s.age_s = std::difftime(std::time(nullptr), st.st_mtime);
  return s;
}

bool create_exclusive(const std::string& path, const std::string& text, const std::string& host, ino_t* ino) {
  const std::string draft = own_name(path, host, ".claim");
  struct stat st {};
  {
    Fd f{::open(draft.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    if (f.fd < 0) fail("cannot create", draft, errno);
    const bool ok = ::write(f.fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                    ::fsync(f.fd) == 0 && ::fstat(f.fd, &st) == 0;
    if (!ok) {
      const int err = errno;
      ::unlink(draft.c_str());
      fail("cannot write", draft, err);
    }
  }
  const bool linked = ::link(draft.c_str(), path.c_str()) == 0;  // a hard link shares the draft's inode
  const int err = errno;
  ::unlink(draft.c_str());
  if (linked) {
    if (ino) *ino = st.st_ino;
    return true;
  }
  if (err == EEXIST) return false;
  fail("cannot create", path, err);
}

bool remove_if_same(const std::string& path, const Seen& judged, const std::string& host) {
  const std::string aside = own_name(path, host, ".aside");
  if (::rename(path.c_str(), aside.c_str()) != 0) {
    if (gone(errno)) return false;
    fail("cannot move aside", path, errno);
  }
  const Seen moved = look(aside);
  if (moved.found && moved.ino == judged.ino && moved.text == judged.text) {
    ::unlink(aside.c_str());
    return true;
  }
  // Not the file judged: a claim made since. Back into place, unless yet another claim took
  // the name in this instant (then the moved claim has lost, as if it had come later).
  const bool back = ::link(aside.c_str(), path.c_str()) == 0;
  const int err = errno;
  ::unlink(aside.c_str());
  if (!back && err != EEXIST) fail("cannot put back", path, err);
  return false;
}

void remove_dead_leftovers(const std::string& path, const std::string& host) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  std::error_code ec;
  for (const std::string& base : {p.filename().string(), p.filename().string() + ".takeover"}) {
    const std::string prefix = base + "." + host + ".";
    for (const auto& e : fs::directory_iterator(p.parent_path(), ec)) {
      const std::string name = e.path().filename().string();
      if (name.size() <= prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string suffix = name.substr(name.size() - 6);
      if (suffix != ".claim" && suffix != ".aside") continue;
      const std::string pid = name.substr(prefix.size(), name.size() - 6 - prefix.size());
      if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
      const long n = std::stol(pid);
      if (n != static_cast<long>(::getpid()) && !process_alive(n, 0)) fs::remove(e.path(), ec);
    }
  }
}

}  // namespace codistill::owner_files
