#include "codistill/engine/metrics.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>

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
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0)
    throw std::runtime_error("cannot write metrics file " + path_ + ": " + std::strerror(errno));
}

}  // namespace codistill
