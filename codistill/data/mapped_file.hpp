#pragma once
// A read-only memory map of a whole file (POSIX mmap), owned RAII-style.
//
// Token files and arrays (.npy, stored .npz members, contiguous HDF5 datasets) are mapped
// rather than read so that the workers of one machine share the page cache's copy instead
// of each holding its own, and so that opening a large file costs nothing until its pages
// are touched. The file is mapped MAP_SHARED and
// PROT_READ: a writer never modifies a published file in place (it renames a new one over
// it), so the bytes seen here never change under the reader.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace codistill::data {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps the whole file. Throws std::runtime_error naming the path and the failing call
  // (open, fstat, mmap) with the system's reason; a path that is not a regular file is an
  // error too. An empty file gives an empty map (mmap cannot map 0 bytes).
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::span<const std::uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  void release() noexcept;

  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace codistill::data
