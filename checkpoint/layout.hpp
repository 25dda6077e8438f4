#pragma once
// How tensors are laid out in a checkpoint file. INTERNAL to checkpoint/*.cpp, and free
// of HDF5 so that it can be reasoned about (and tested) on its own.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"

namespace codistill::checkpoint::layout {

using Dims = std::vector<std::uint64_t>;

// Chunks are blocks of whole rows of the row-major array: chunk shape
// [1, ..., 1, rows, d[split+1], ..., d[n-1]]. Each chunk then covers one contiguous run
// of the tensor's memory, so a chunk is written from (and read into) one memory range.
struct ChunkPlan {
  Dims chunk_dims;
  std::size_t split = 0;
  std::uint64_t rows = 0;   // chunk_dims[split]
  std::uint64_t inner = 1;  // elements per row: product of dims after split
  std::uint64_t outer = 1;  // product of dims before split
  std::uint64_t blocks = 0; // chunks along split: ceil(dims[split] / rows)

  std::uint64_t count() const { return outer * blocks; }
  std::uint64_t chunk_elements() const { return rows * inner; }

  struct Piece {
    Dims offset;             // the chunk's first coordinate (what H5D*_chunk take)
    std::uint64_t first = 0; // its first element in the flat array
    std::uint64_t elements = 0;  // < chunk_elements() for the last block along split
  };
  Piece piece(std::uint64_t k, const Dims& dims) const;  // k in [0, count()), file order
};

// The plan for a new dataset: chunks of at most max_elements (and at least one row),
// with the row count picked to waste little padding in the last block. nullopt for a
// scalar or an empty tensor, which are stored contiguous and unfiltered.
std::optional<ChunkPlan> plan_chunks(const Dims& dims, std::uint64_t max_elements);
// The plan matching an existing dataset's chunk shape; nullopt when it is not of the
// row-block form (a file written by another tool), which the reader handles generically.
std::optional<ChunkPlan> plan_from_chunk_dims(const Dims& dims, const Dims& chunk_dims);

// "/params/fc1/weight"
std::string full_path(Section s, const std::string& name);
// The reason a tensor name is unusable, or empty when it is fine.
std::string name_problem(const std::string& name);

// The bytes the content digest takes before a dataset's data:
//   full path, NUL, element type name, NUL, rank as u64 LE, each dimension as u64 LE.
std::string digest_header(const std::string& full_path, ElemType t, const Dims& dims);

// Index of the first NaN/Inf among n floats of type t (f32, f64, bf16), or -1.
std::int64_t first_non_finite(const void* data, std::uint64_t n, ElemType t);

// float32 -> bfloat16 bits (round to nearest even, NaN kept; kernels/cpu/bf16.hpp's rule),
// little-endian, into `out` (2n bytes); and back, exactly.
void to_bf16(const float* x, unsigned char* out, std::uint64_t n);
void from_bf16(const unsigned char* in, float* y, std::uint64_t n);

}  // namespace codistill::checkpoint::layout
