#include "checkpoint/fsutil.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <system_error>

namespace codistill::checkpoint::fsutil {

namespace {

[[noreturn]] void throw_errno(int err, const std::string& what, const std::string& path) {
  throw std::system_error(err, std::generic_category(), what + " " + path);
}

// Closes on scope exit; close errors after fsync are not informative (fsync reported).
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

void fsync_file(const std::string& path) {
  Fd f{::open(path.c_str(), O_RDWR | O_CLOEXEC)};
  if (f.fd < 0) throw_errno(errno, "cannot open for fsync", path);
  if (::fsync(f.fd) != 0) throw_errno(errno, "fsync failed on", path);
}

void fsync_dir(const std::string& path) {
  Fd f{::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (f.fd < 0) throw_errno(errno, "cannot open folder for fsync", path);
  if (::fsync(f.fd) != 0 && errno != EINVAL) throw_errno(errno, "fsync failed on folder", path);
}

void rename_no_replace(const std::string& from, const std::string& to) {
#ifdef RENAME_NOREPLACE
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return;
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) throw_errno(errno, "cannot rename to", to);
#endif
  if (::link(from.c_str(), to.c_str()) == 0) {
    ::unlink(from.c_str());  // the final name is complete; a leftover temp would only waste space
    return;
  }
  int err = errno;
  if (err != EPERM && err != ENOTSUP && err != EOPNOTSUPP) throw_errno(err, "cannot link to", to);
  // No hard links either (some FUSE file systems): a checked rename. Only a writer racing
  // for the same name could slip in between, and a worker's folder has one writer.
  if (::access(to.c_str(), F_OK) == 0) throw_errno(EEXIST, "cannot rename to", to);
  if (::rename(from.c_str(), to.c_str()) != 0) throw_errno(errno, "cannot rename to", to);
}

void start_writeback(int fd) {
#if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
  if (fd >= 0) ::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);  // advisory: errors surface at fsync
#else
  (void)fd;
#endif
}

bool gone_errno(int err) { return err == ENOENT || err == ESTALE; }

std::string vanished_reason(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return {};
  if (errno == ENOENT) return "no such file";
  if (errno == ESTALE) return "no such file (stale file handle: removed or replaced through another client)";
  return {};
}

bool remove_if_exists(const std::string& path) {
  if (::unlink(path.c_str()) == 0) return true;
  if (gone_errno(errno)) return false;
  throw_errno(errno, "cannot remove", path);
}

bool pid_alive(long pid) {
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH;
}

long this_pid() { return static_cast<long>(::getpid()); }

}  // namespace codistill::checkpoint::fsutil
