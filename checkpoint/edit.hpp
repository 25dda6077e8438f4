#pragma once
// In-place edits and forensics of a checkpoint file, for fault-injection tests and repair
// tools. They bypass the publish protocol: a published checkpoint is immutable and others
// may be reading it, so use these on copies or on files nobody else opens.
#include <cstdint>
#include <string>
#include <vector>

namespace codistill::checkpoint {

// Removes a root attribute; throws CheckpointError when it cannot.
void delete_attribute(const std::string& path, const std::string& name);
// Replaces (or adds) a root attribute: int64, or a UTF-8 string (fixed length, as the
// writer stores them).
void set_attribute(const std::string& path, const std::string& name, std::int64_t value);
void set_attribute(const std::string& path, const std::string& name, const std::string& value);

// Where a dataset's bytes lie in the file: one entry per stored chunk (with its 4-byte
// fletcher32 checksum at the end), or one for a contiguous dataset; none when it has no
// storage. `dataset` is a full path such as "/params/fc1/weight".
struct StoredExtent {
  std::uint64_t file_offset = 0;
  std::uint64_t bytes = 0;
};
std::vector<StoredExtent> stored_extents(const std::string& path, const std::string& dataset);

}  // namespace codistill::checkpoint
