#include "codistill/util/config_error.hpp"

#include <utility>

namespace codistill {
namespace {

// Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on the inlined
// `":" + std::to_string(line)` here.
std::string error_text(const std::string& key_path, const std::string& file, int line, const std::string& detail) {
  std::string out;
  if (!file.empty()) {
    out.append(file);
    if (line > 0) out.append(":").append(std::to_string(line));
    out.append(": ");
  }
  if (!key_path.empty()) out.append(key_path).append(": ");
  return out.append(detail);
}

}  // namespace

ConfigError::ConfigError(std::string key_path, std::string file, int line, std::string detail)
    : std::runtime_error(error_text(key_path, file, line, detail)),
      key_path_(std::move(key_path)),
      file_(std::move(file)),
      line_(line),
      detail_(std::move(detail)) {}

}  // namespace codistill
