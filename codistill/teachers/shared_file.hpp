#pragma once
// Read-only files of parameter blocks in a shared-memory folder (/dev/shm), so that the
// ranks of a worker group on one node hold one copy of a teacher instead of one each
// (issue 37; teachers/teacher_sharing.hpp uses it). One rank writes a file, published
// atomically (a temp file beside it, then rename: a reader never sees a half-written one);
// every rank maps it PROT_READ, so a stray write into a teacher's weights faults instead of
// silently changing what the other ranks read.
//
// Names: "<dir>/codistill-teacher.<pid>.<rest>", pid the writer's, so that the files of a
// run that died (kill -9 leaves them: tmpfs keeps them until reboot) can be found and
// removed by the next run on the node (remove_stale_shared_files). An unlinked file stays
// valid for the processes that mapped it, so removing one is always safe.
//
// Layout: a header page (magic, the header's size, the meta text's length, the block
// count, each block's offset and size, the meta text), then each block at a page-aligned
// offset (the arena's 64-byte alignment holds in the mapping).
#include <cstddef>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace codistill {

// A shared file that cannot be written (no folder, full, no permission) or read (missing,
// truncated, not one of ours); the message names the path and the system's reason.
class SharedFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writes `blocks` and `meta` (free text: what the file holds) to `path`, through
// ".<name>.tmp" in the same folder, then renames it. Throws SharedFileError, removing the
// temp file, when any write fails (ENOSPC: the folder is full).
void publish_shared_file(const std::string& path, const std::string& meta,
                         const std::vector<std::span<const std::byte>>& blocks);

// A read-only mapping of a published file, unmapped when the last holder lets go (tensors
// over its blocks hold it through aliasing shared_ptrs).
class SharedMapping {
 public:
  // Throws SharedFileError when `path` is missing, truncated or not a shared file.
  static std::shared_ptr<SharedMapping> open(const std::string& path);
  ~SharedMapping();
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;

  const std::string& path() const { return path_; }
  const std::string& meta() const { return meta_; }
  std::size_t block_count() const { return blocks_.size(); }
  std::span<const std::byte> block(std::size_t i) const { return blocks_.at(i); }

 private:
  SharedMapping() = default;
  std::string path_, meta_;
  void* base_ = nullptr;
  std::size_t size_ = 0;
  std::vector<std::span<const std::byte>> blocks_;
};

// The writer's hold on a published file: removes it when destroyed (the teacher replaced,
// the run over). The ranks that mapped it keep their mappings. Only the file it was made
// for: one published under the same name since (a reload of the same step) stays.
class SharedFileOwner {
 public:
  explicit SharedFileOwner(std::string path);
  ~SharedFileOwner();
  SharedFileOwner(const SharedFileOwner&) = delete;
  SharedFileOwner& operator=(const SharedFileOwner&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  unsigned long long device_ = 0, inode_ = 0;
};

// "<dir>/codistill-teacher.<writer_pid>.<rest>"; `rest` must not contain '/'.
std::string shared_file_path(const std::string& dir, long writer_pid, const std::string& rest);

// Removes the files of `dir` (published or temp) whose writer's pid is not a live process
// on this node, and returns their paths. A folder that cannot be listed removes nothing.
std::vector<std::string> remove_stale_shared_files(const std::string& dir);

}  // namespace codistill
