#pragma once
// metrics.jsonl writer (DESIGN.md section 7): one JSON object per line, each with `event`,
// `step` and `time` (seconds since the writer started). Lines are flushed as written so
// that a killed worker leaves every completed event readable.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace codistill {

class MetricsWriter {
 public:
  MetricsWriter() = default;  // disabled: emit() does nothing
  // Opens path for appending; throws std::runtime_error naming the file on failure.
  explicit MetricsWriter(const std::string& path);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Adds event, step and time to fields and writes the line.
  void emit(const std::string& event, std::int64_t step, nlohmann::json fields = nlohmann::json::object());
  double elapsed_s() const;

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace codistill
