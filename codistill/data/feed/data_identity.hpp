#pragma once
// What data a worker trains on, as the run directory records it (worker-NNN/data.json,
// docs/data.md): the data kind, the resolved path, the files read, and a fingerprint of
// them, so that a worker resumed against other data is refused instead of silently
// continuing another run.
#include <cstdint>
#include <string>
#include <vector>

#include "codistill/data/data_options.hpp"

namespace codistill {

struct DataIdentity {
  std::string kind;
  std::string path;                // data.path with {worker} and {rank} resolved
  std::vector<std::string> files;  // in the order they are read
  // XXH64 over each file's size and the XXH64 of its first 64 KiB (headers and then some):
  // cheap for files of any size, and different for any other file a user would point at.
  std::uint64_t fingerprint = 0;
};

// The identity of a resolved data config (data::for_worker). Synthetic data has no files;
// its fingerprint covers the generator's parameters.
DataIdentity identify_data(const DataConfig& d);

// The files a glob names, sorted; a relative pattern is relative to `dir`. Throws
// ConfigError naming `key` when the pattern is empty or matches no file.
std::vector<std::string> glob_files(const std::string& key, const std::string& pattern, const std::string& dir);

}  // namespace codistill
