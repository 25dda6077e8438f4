#include "codistill/data/text/atomic_write.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace codistill::data::text {

namespace {

[[noreturn]] void fail(const std::string& path, const char* what, int err) {
  throw std::runtime_error(path + ": " + what + " failed: " + std::strerror(err));
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(dir, "open (folder)", errno);
  // Some file systems cannot fsync a folder (EINVAL): the rename is then as durable as
  // they make it.
  if (::fsync(fd) != 0 && errno != EINVAL) {
    int err = errno;
    ::close(fd);
    fail(dir, "fsync (folder)", err);
  }
  ::close(fd);
}

}  // namespace

void write_file_atomically(const std::string& path, const std::function<void(const ByteSink&)>& produce) {
  const std::filesystem::path target(path);
  std::filesystem::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on a chain of `+`.
  std::string tmp_name = ".";
  tmp_name += target.filename().string();
  tmp_name += ".tmp.";
  tmp_name += std::to_string(::getpid());
  const std::string tmp = (dir / tmp_name).string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(tmp, "open", errno);
  try {
    ByteSink sink = [&](const void* data, std::size_t n) {
      const char* p = static_cast<const char*>(data);
      while (n > 0) {
        ssize_t w = ::write(fd, p, n);
        if (w < 0) {
          if (errno == EINTR) continue;
          fail(tmp, "write", errno);
        }
        p += w;
        n -= static_cast<std::size_t>(w);
      }
    };
    produce(sink);
    if (::fsync(fd) != 0) fail(tmp, "fsync", errno);
    int rc = ::close(fd);
    fd = -1;
    if (rc != 0) fail(tmp, "close", errno);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(path, ("rename from " + tmp).c_str(), errno);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_dir(dir.string());
}

}  // namespace codistill::data::text
