#pragma once
// An n-dimensional array as a file holds it (row-major, little-endian, one element type),
// before it becomes a Dataset: what the .npy, .npz and HDF5 readers (npy.hpp, npz.hpp,
// checkpoint/array_file.hpp) hand to the arrays loader (arrays.hpp).
//
// The bytes are a view: into a memory map of the file where the file stores them plainly
// (a .npy, a stored .npz member, a contiguous HDF5 dataset), else into a buffer the reader
// filled (a deflated .npz member, a chunked HDF5 dataset). `keep` owns whichever it is.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace codistill::data {

enum class ArrayDtype { u8, i8, u16, i16, u32, i32, u64, i64, f16, bf16, f32, f64 };

// "uint8", "float32", ... (NumPy's names).
const char* dtype_name(ArrayDtype t);
std::int64_t dtype_bytes(ArrayDtype t);
bool is_integer(ArrayDtype t);

struct RawArray {
  ArrayDtype dtype = ArrayDtype::u8;
  std::vector<std::int64_t> shape;
  std::span<const std::uint8_t> bytes;  // numel() * dtype_bytes(dtype), row-major
  std::shared_ptr<const void> keep;     // owns what bytes points into
  bool mapped = false;                  // bytes lie in a memory map of the file
  std::string origin;                   // "file.npz: train_x", for messages

  std::int64_t numel() const;
  std::string shape_str() const;  // "(60000, 28, 28)", as NumPy prints a shape
};

// numel of a shape, or -1 when a dimension is negative or the product overflows int64.
std::int64_t checked_numel(const std::vector<std::int64_t>& shape, std::int64_t elem_bytes);

// Element i of an integer array as int64 (uint64 above INT64_MAX comes back negative, which
// every caller treats as out of range).
std::int64_t integer_at(const RawArray& a, std::int64_t i);

// Elements [first, first + n) of a uint8 or floating array as float32 (float64 rounds to
// nearest; float16 and bfloat16 convert exactly).
void to_float(const RawArray& a, std::int64_t first, std::int64_t n, float* out);

}  // namespace codistill::data
