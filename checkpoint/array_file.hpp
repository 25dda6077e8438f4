#pragma once
// Plain n-dimensional arrays in a user's HDF5 file (data.kind arrays: train_x, train_y,
// ...), through the checkpoint library's HDF5 layer. Not checkpoints: any HDF5 file whose
// root holds numeric datasets, as h5py writes them.
//
// A dataset stored contiguously without filters and little-endian can be read in place:
// `file_offset` says where its bytes start in the file, and the caller maps them. Any other
// dataset (chunked, compressed) is read into `bytes`. Errors are CheckpointError naming the
// file and the dataset.
#include <cstdint>
#include <string>
#include <vector>

namespace codistill::checkpoint {

struct H5Array {
  // NumPy's name of the element type (uint8 ... int64, float16, float32, float64; bfloat16,
  // which h5py can write as a custom float but NumPy cannot name), or what
  // the file holds when it is none of those ("string", "compound", ...).
  std::string dtype;
  bool supported = false;  // dtype is one of the numeric types above
  std::vector<std::int64_t> shape;
  std::int64_t file_offset = -1;    // >= 0: the bytes lie there in the file, in row-major order
  std::vector<std::uint8_t> bytes;  // else (and only when read): the elements, little-endian
};

// The names of the datasets at the root of the file.
std::vector<std::string> h5_array_names(const std::string& path);

// Describes dataset `name`; reads its elements into `bytes` unless it can be mapped (or
// `read` is false, or its dtype is not supported).
H5Array read_h5_array(const std::string& path, const std::string& name, bool read = true);

}  // namespace codistill::checkpoint
