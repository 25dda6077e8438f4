#pragma once
// The one exception type of the checkpoint library: every failure names the file (or
// folder) and says why, e.g. "run/worker-000/ckpt-000000100.h5: missing attribute step".
#include <stdexcept>
#include <string>

namespace codistill::checkpoint {

class CheckpointError : public std::runtime_error {
 public:
  CheckpointError(std::string path, std::string reason)
      : std::runtime_error(path + ": " + reason), path_(std::move(path)), reason_(std::move(reason)) {}
  const std::string& path() const { return path_; }
  const std::string& reason() const { return reason_; }

 private:
  std::string path_, reason_;
};

}  // namespace codistill::checkpoint
