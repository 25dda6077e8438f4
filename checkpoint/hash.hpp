#pragma once
// The two checksums of a checkpoint (docs/checkpoint-format.md):
//  - the content digest over all datasets, streaming, computed by libxxhash: XXH3-64
//    (seed 0) for files written now, XXH64 (seed 0) for files written before
//    2026-11-24. Both run at many GB/s on one core and are specified publicly, so a
//    reader in another language (Python's `xxhash` package) can recompute them. XXH3
//    replaced XXH64 because hashing is what limits a warm checkpoint load.
//  - Fletcher-32 exactly as HDF5 computes it for its fletcher32 filter, so that the
//    library can write and check filtered chunks itself (H5Dwrite_chunk/H5Dread_chunk)
//    without HDF5's filter pipeline copying every chunk twice.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace codistill::checkpoint {

// The algorithm of a file's content digest; its name is the `content_digest_algorithm`
// attribute ("xxh3-64"; a file without that attribute was hashed with "xxh64").
enum class DigestAlgorithm { xxh64, xxh3_64 };
const char* digest_algorithm_name(DigestAlgorithm a);
// Throws std::invalid_argument naming the valid names for anything else.
DigestAlgorithm parse_digest_algorithm(const std::string& name);
std::vector<std::string> digest_algorithm_names();

// A streaming content digest (libxxhash state behind a pointer: no xxhash.h here).
class ContentDigest {
 public:
  explicit ContentDigest(DigestAlgorithm a = DigestAlgorithm::xxh3_64);
  ~ContentDigest();
  ContentDigest(ContentDigest&&) noexcept;
  ContentDigest& operator=(ContentDigest&&) noexcept;
  // Starts over, possibly with another algorithm (readers learn it from the file).
  void reset(DigestAlgorithm a);
  void update(const void* data, std::size_t n);
  std::uint64_t digest() const;  // of everything so far; update may continue afterwards
  DigestAlgorithm algorithm() const { return algorithm_; }

 private:
  struct State;
  std::unique_ptr<State> state_;
  DigestAlgorithm algorithm_;
};

std::uint64_t xxh64(const void* data, std::size_t n, std::uint64_t seed = 0);
std::uint64_t xxh3_64(const void* data, std::size_t n);

// HDF5's H5_checksum_fletcher32, bit for bit (including its reduction points, which
// matter when sums overflow), but vectorizable: ~5x faster than the scalar original.
std::uint32_t fletcher32(const void* data, std::size_t n);

// 16 lowercase hex digits, the form the content_digest attribute stores.
std::string hex64(std::uint64_t v);

}  // namespace codistill::checkpoint
