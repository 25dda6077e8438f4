#pragma once
// Helpers shared by the codistill-inspect commands: aligned text tables, human units,
// tensor statistics, and JSON values for numbers that may not be finite.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.hpp"
#include "codistill/inspect/inspect.hpp"

namespace codistill::inspect {

// A text table whose columns are as wide as their widest cell. `align` has one letter per
// column: 'l' (names, paths) or 'r' (numbers, so that digits line up).
class Table {
 public:
  Table(std::vector<std::string> header, std::string align);
  void add(std::vector<std::string> row);
  bool empty() const { return rows_.empty(); }
  // One line per row, header first, each prefixed with `indent`; no trailing spaces.
  std::string render(const std::string& indent = "") const;

 private:
  std::vector<std::vector<std::string>> rows_;  // rows_[0] is the header
  std::string align_;
};

using kernels::human_bytes;                       // "812 B", "1.57 MiB" (kernels/tensor.hpp)
std::string human_duration(double seconds);      // "42s", "3m 20s", "2h 05m", "4d 03h"
std::string utc_time(std::int64_t unix_seconds);  // "2024-05-01 12:34:56 UTC"
std::string num(double v);                       // 6 significant digits; "nan", "inf"
std::string fixed(double v, int decimals);       // "0.4123"
std::string percent(double fraction);            // "87.30%"

// A double as JSON; null when it is not finite (JSON has no NaN or Inf).
Json json_number(double v);

struct Stats {
  std::int64_t count = 0;
  double mean = 0, std = 0, min = 0, max = 0;  // std: population; all NaN when count == 0
};
// Over all elements, in double whatever the element type.
Stats tensor_stats(const checkpoint::TensorValue& t);

// The check RunStore::load_freshest makes: a file named ckpt-<step>.h5 whose step
// attribute says otherwise is treated as invalid. Empty when consistent (or when the file
// name is not a checkpoint name), else the reason.
std::string name_step_mismatch(const std::string& path, std::int64_t step_attribute);

// Reads a checkpoint for a command; failures (CheckpointError) pass through unchanged:
// their message already names the file and the reason.
checkpoint::CheckpointData read_checkpoint(const std::string& path, bool optimizer, bool state);

// "worker 1, step 300" as a short label of a checkpoint in headers.
std::string describe(const checkpoint::CheckpointMeta& meta);

}  // namespace codistill::inspect
