#pragma once
// The two checksums of a checkpoint (docs/checkpoint-format.md):
//  - XXH64 (seed 0), streaming: the content digest over all datasets. Chosen because it
//    runs at several GB/s on one core and is specified publicly, so a reader in another
//    language (Python's `xxhash` package, or the short reference in the format doc) can
//    recompute it.
//  - Fletcher-32 exactly as HDF5 computes it for its fletcher32 filter, so that the
//    library can write and check filtered chunks itself (H5Dwrite_chunk/H5Dread_chunk)
//    without HDF5's filter pipeline copying every chunk twice.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace codistill::checkpoint {

class Xxh64 {
 public:
  explicit Xxh64(std::uint64_t seed = 0);
  void update(const void* data, std::size_t n);
  std::uint64_t digest() const;  // of everything so far; update may continue afterwards

 private:
  std::array<std::uint64_t, 4> acc_{};
  std::array<unsigned char, 32> buf_{};  // a partial 32-byte stripe
  std::size_t buffered_ = 0;
  std::uint64_t total_ = 0;
  std::uint64_t seed_;
};

std::uint64_t xxh64(const void* data, std::size_t n, std::uint64_t seed = 0);

// HDF5's H5_checksum_fletcher32, bit for bit (including its reduction points, which
// matter when sums overflow), but vectorizable: ~5x faster than the scalar original.
std::uint32_t fletcher32(const void* data, std::size_t n);

// 16 lowercase hex digits, the form the content_digest attribute stores.
std::string hex64(std::uint64_t v);

}  // namespace codistill::checkpoint
