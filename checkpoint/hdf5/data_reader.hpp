#pragma once
// The data of a checkpoint's datasets, read and checked. INTERNAL to checkpoint/*.cpp (it
// includes <hdf5.h> through hdf5.hpp). A dataset written by this library is read chunk by
// chunk with H5Dread_chunk, straight into the result where it can be, while the helper
// thread checks the previous chunk: its fletcher32 checksum, finite values (params and
// buffers) and the content digest; any other dataset goes through HDF5's filter pipeline
// whole and is then checked the same way. reader.cpp does the rest of read().
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/hash.hpp"
#include "checkpoint/hdf5/hdf5.hpp"
#include "checkpoint/layout.hpp"
#include "checkpoint/hdf5/pipeline.hpp"

namespace codistill::checkpoint::data {

// Sections whose values feed a model's forward pass: NaN or Inf there is rejected
// (ReadOptions::check_finite).
inline bool finite_checked(Section s) { return s == Section::params || s == Section::buffers; }

struct DatasetInfo {
  ElemType type;
  layout::Dims dims;
  bool little_endian;
};

// The type and shape of the dataset at path in section s; throws h5::Error for a type
// the section does not hold.
DatasetInfo inspect(hid_t dset, const std::string& path, Section s);

// One chunk read by the caller's thread, for the helper to check (fletcher32, finite
// values), hash, and move into the result when it was read into a staging buffer.
struct ReadTask {
  std::string header;  // digest header, on the first task of a dataset
  const std::string* path = nullptr;
  const std::string* name = nullptr;  // set when the finite check applies
  Section section = Section::params;  // for the finite check's message
  ElemType type = ElemType::f32;
  std::uint64_t chunk = 0, first = 0;  // chunk index, index of its first element
  const unsigned char* buf = nullptr;
  std::size_t full = 0, n = 0;  // chunk bytes (checksummed), data bytes
  std::uint32_t stored = 0;     // its checksum, copied out before the next read can land on it
  unsigned char* dest = nullptr;  // where the data belongs; null: discard
};

class DataReader {
 public:
  static constexpr std::size_t kDepth = 2;

  DataReader(const ReadOptions& opt, DigestAlgorithm algorithm, bool threaded)
      : opt_(opt), digest_(algorithm), check_([this](ReadTask& t) { check(t); }, threaded, kDepth) {
    stages_.resize(threaded ? kDepth + 2 : 1);  // round robin, as in the writer
  }

  // Reads one dataset into dest (nullptr: only check and hash it).
  void read(hid_t dset, const std::string& path, Section s, const std::string& name, const DatasetInfo& info,
            unsigned char* dest);

  // Bytes of dataset storage read so far (chunks with their checksums, contiguous data).
  std::uint64_t bytes_read() const { return bytes_read_; }

  // Waits for the checks of everything read; returns the digest.
  std::uint64_t finish() {
    check_.stop();
    return digest_.digest();
  }

 private:
  unsigned char* stage(std::size_t bytes);
  void check(ReadTask& t);

  const ReadOptions& opt_;
  ContentDigest digest_;  // helper only (or the caller's thread while the helper is idle)
  std::vector<std::vector<unsigned char>> stages_;
  std::size_t next_ = 0;
  std::uint64_t bytes_read_ = 0;
  Pipeline<ReadTask> check_;  // last: joined first, while the stages still exist
};

}  // namespace codistill::checkpoint::data
