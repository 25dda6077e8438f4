#include "codistill/persist/metrics.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <unistd.h>

namespace codistill {

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "a");
  if (!file_)
    throw std::runtime_error("cannot open metrics file " + path + ": " + std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

double MetricsWriter::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void MetricsWriter::emit(const std::string& event, std::int64_t step, nlohmann::json fields) {
  if (!file_) return;
  nlohmann::json line = {{"event", event}, {"step", step}, {"time", elapsed_s()}};
  line.update(fields);
  // NaN/Inf are not JSON: dump() writes them as null, which is what readers should see.
  std::string text = line.dump() + "\n";
  // One unbuffered write per line, so that a failure (a full disk) can be undone: the file
  // is cut back to where the line began and never ends in a torn line. The worker then
  // stops with the error (metrics are the run's record; its checkpoints stay as they are).
  const int fd = ::fileno(file_);
  const off_t begin = ::lseek(fd, 0, SEEK_END);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      if (begin >= 0 && ::ftruncate(fd, begin) != 0) {
        // the torn tail stays; the error below is still the one to report
      }
      throw std::runtime_error("cannot write metrics file " + path_ + ": " + std::strerror(err));
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace codistill
