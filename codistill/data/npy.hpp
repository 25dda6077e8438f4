#pragma once
// Reader for NumPy's .npy format (numpy.lib.format, versions 1.0, 2.0 and 3.0).
//
// A .npy file is the magic "\x93NUMPY", a major and a minor version byte, the header's
// length (uint16 little-endian in 1.0, uint32 in 2.0 and 3.0), the header (a Python dict
// literal: {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }) and then
// the elements. Only what the arrays loader can use is accepted: a plain little-endian
// numeric dtype, C order. A pickled array (dtype object) is refused without unpickling
// anything, as are Fortran order, big-endian, structured, string and boolean dtypes, a
// header that is not a dict literal, and data that is shorter or longer than the shape
// says. Every refusal is a std::runtime_error that starts with the origin (the file, or
// "file.npz: member") and names the problem.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "codistill/data/raw_array.hpp"

namespace codistill::data {

struct NpyHeader {
  ArrayDtype dtype = ArrayDtype::u8;
  std::vector<std::int64_t> shape;
  std::size_t data_offset = 0;  // where the elements start
};

// The header of the .npy image `bytes` (a whole file or .npz member).
NpyHeader parse_npy_header(std::span<const std::uint8_t> bytes, const std::string& origin);

// The array of the .npy image `bytes`, viewing into them; `keep` owns them.
RawArray npy_array(std::span<const std::uint8_t> bytes, std::shared_ptr<const void> keep, const std::string& origin);

// A .npy file, memory-mapped.
RawArray read_npy(const std::string& path);

}  // namespace codistill::data
