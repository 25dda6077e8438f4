#pragma once
// The error of a configuration value, naming its key path and where it was written. Thrown
// by the config loader (codistill/config) and by the layers that check what the loader
// cannot (a model that does not fit its data, a layer list that cannot be built); the
// executables turn it into exit code 2.
#include <stdexcept>
#include <string>

namespace codistill {

// Where a configuration problem is: the key path ("optimizer.lr", empty when the problem
// is not about one key), the file ("--set" for a command-line override) and the 1-based
// line (0 when unknown). what() reads "configs/x.yaml:12: optimizer.lr: expected a
// number > 0, got 'abc'"; detail() is the part after the key path.
class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string key_path, std::string file, int line, std::string detail);

  const std::string& key_path() const noexcept { return key_path_; }
  const std::string& file() const noexcept { return file_; }
  int line() const noexcept { return line_; }
  const std::string& detail() const noexcept { return detail_; }

 private:
  std::string key_path_;
  std::string file_;
  int line_;
  std::string detail_;
};

}  // namespace codistill
