#pragma once
// A poisoned but valid checkpoint, for the teacher gate's tests: the peer that diverged or
// trained on broken data, whose files pass every integrity check.
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "checkpoint/checkpoint.hpp"

namespace codistill::test {

// Rewrites checkpoint `path` with parameter `param` (e.g. a classifier's "fc3/weight")
// times -20: still a valid file (written afresh, so its digest is right) that loads and
// fits, whose model predicts the wrong classes with confidence.
inline void poison_checkpoint(const std::string& path, const std::string& param) {
  checkpoint::CheckpointData data = checkpoint::read(path);
  bool found = false;
  for (auto& v : data.params)
    if (v.name == param) {
      float* w = v.real.data<float>();
      for (std::int64_t i = 0; i < v.real.numel(); ++i) w[i] *= -20.0f;
      found = true;
    }
  if (!found) throw std::invalid_argument("poison_checkpoint: " + path + " has no parameter " + param);
  // write() never replaces a file: written beside it, then renamed over it.
  const std::string fresh = path + ".poisoned";
  checkpoint::write(fresh, data.view());
  std::filesystem::rename(fresh, path);
}

}  // namespace codistill::test
