#pragma once
// Reader for the IDX format of MNIST and Fashion-MNIST, gzip-compressed or raw.
//
// An IDX file is a 4-byte magic (two zero bytes, a type code, the number of
// dimensions), one big-endian uint32 per dimension, then the elements in row-major
// order. Only what these datasets use is accepted: unsigned bytes (type 0x08), with
// 3 dimensions for images (magic 0x00000803: N, rows, cols) and 1 for labels
// (magic 0x00000801: N). A file whose first two bytes are 1f 8b is gunzipped first.
//
// Every malformed input is a std::runtime_error whose message starts with the file's
// path and names the problem (missing, empty, neither gzip nor IDX, wrong magic, short
// header, short data with the expected and actual byte counts, trailing bytes, a corrupt
// or cut-off gzip stream, zero examples); never a crash or a silently wrong result.
#include <cstdint>
#include <string>
#include <vector>

#include "codistill/data/dataset.hpp"

namespace codistill::data {

struct IdxImages {
  std::int64_t count = 0, rows = 0, cols = 0;
  std::vector<std::uint8_t> pixels;  // count * rows * cols, row-major
};

IdxImages read_idx_images(const std::string& path);
std::vector<std::uint8_t> read_idx_labels(const std::string& path);

// Reads an image file and its label file into a Dataset of shape [N, 1, rows, cols]
// holding the raw pixel values 0..255 as floats (no normalization).
// classes > 0: every label must be below it. classes == 0: classes = max label + 1.
// Throws std::runtime_error naming both files when their counts differ, and naming the
// label file, the label and its index when a label is out of range.
Dataset read_idx_dataset(const std::string& images_path, const std::string& labels_path,
                         std::int64_t classes, const std::string& name);

}  // namespace codistill::data
