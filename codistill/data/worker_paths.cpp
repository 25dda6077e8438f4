#include "codistill/data/worker_paths.hpp"

#include <array>
#include <stdexcept>
#include <utility>

namespace codistill::data {
namespace {

// Every path field with its key, for substitution and messages.
using PathFields = std::array<std::pair<const char*, std::string DataConfig::*>, 7>;
constexpr PathFields kPathFields = {{{"data.path", &DataConfig::path},
                                     {"data.train_images", &DataConfig::train_images},
                                     {"data.train_labels", &DataConfig::train_labels},
                                     {"data.test_images", &DataConfig::test_images},
                                     {"data.test_labels", &DataConfig::test_labels},
                                     {"data.train", &DataConfig::train},
                                     {"data.valid", &DataConfig::valid}}};

bool has_placeholder(const std::string& s) {
  return s.find("{worker}") != std::string::npos || s.find("{rank}") != std::string::npos;
}

// s with the placeholders replaced; an unknown "{name}" is an error naming `key`. A '{'
// without a matching '}' is taken literally (a glob may hold one in a character class).
std::string substitute(const std::string& s, const char* key, int worker, int rank) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t close = s[i] == '{' ? s.find('}', i) : std::string::npos;
    if (close == std::string::npos) {
      out += s[i++];
      continue;
    }
    const std::string name = s.substr(i + 1, close - i - 1);
    if (name == "worker") out += std::to_string(worker);
    else if (name == "rank") out += std::to_string(rank);
    else
      throw std::invalid_argument(std::string(key) + ": unknown placeholder {" + name + "} in '" + s +
                                  "' (valid: {worker}, {rank})");
    i = close + 1;
  }
  return out;
}

}  // namespace

bool names_worker(const DataConfig& d) {
  for (const auto& [key, field] : kPathFields)
    if (has_placeholder(d.*field)) return true;
  return false;
}

DataConfig for_worker(const DataConfig& d, int worker, int rank) {
  DataConfig out = d;
  for (const auto& [key, field] : kPathFields) out.*field = substitute(out.*field, key, worker, rank);
  if (out.shard == "auto") out.shard = names_worker(d) ? "none" : "disjoint";
  return out;
}

}  // namespace codistill::data
