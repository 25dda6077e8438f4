#pragma once
// An in-memory labelled image dataset and the entry point that builds the train/test
// splits a run trains on (DESIGN.md section 8, `data` section of the config).
//
// Everything lives in host memory as float32: Fashion-MNIST is 60000 x 784 floats
// (188 MB), small enough that every worker keeps its own copy and the training loop only
// ever copies rows out of it (see sampler.hpp). The device copy is the trainer's
// business (data/feed/batch_loader.hpp).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codistill/data/data_options.hpp"
#include "kernels/tensor.hpp"

namespace codistill::data {

// The affine map that was applied to the raw values: stored = (raw - shift) / scale.
//   standard: shift = mean, scale = std of the raw training split (one scalar each);
//   unit:     shift = 0, scale = 255 for IDX pixels (synthetic data: 0 and 1);
//   none:     shift = 0, scale = 1.
// Kept with each split so that it can be reported and so that raw inputs given later
// (e.g. `codistill-inspect eval --data`) can be mapped the same way as at training time.
struct Normalization {
  std::string kind = "none";  // standard | unit | none
  double shift = 0.0;
  double scale = 1.0;
};

struct Dataset {
  kernels::Tensor images;              // float32 on the CPU, [N, C, H, W]
  std::vector<std::int32_t> labels;    // N entries in [0, classes)
  std::int64_t classes = 0;
  std::string name;                    // e.g. "fashion-mnist/train"
  Normalization normalization;         // what was applied to `images`
  // Where every raw value was a byte (IDX pixels), each value's byte, which decodes to its
  // image value bit for bit (byte_codes.hpp); gather() reads these. Empty otherwise. Whoever
  // changes `images` after loading clears it.
  std::vector<std::uint8_t> codes;
  // Where the examples are the bytes of a memory-mapped file (kind arrays: a uint8 .npy, a
  // stored .npz member, a contiguous HDF5 dataset, in [N, C, H, W] order): the bytes, their
  // owner and the shape. `images` then stays undefined and `codes` empty; rows are decoded
  // from the map as from codes, so only the rows a batch touches are ever read, and a file
  // larger than the memory left to the process trains.
  std::span<const std::uint8_t> mapped;
  std::shared_ptr<const void> mapped_keep;
  kernels::Shape mapped_shape;

  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
  bool is_mapped() const { return mapped_keep != nullptr; }
  kernels::Shape shape() const;           // [N, C, H, W]
  kernels::Shape example_shape() const;   // [C, H, W]
  std::int64_t example_numel() const;     // C * H * W
  const float* example(std::int64_t i) const;  // row i of `images`, unchecked in release builds
  // The byte code of every value (codes, or the map), or nullptr where there are none.
  const std::uint8_t* code_bytes() const;
  // Rows [first, first + n) as float32, decoded where the values are byte codes.
  void copy_rows(std::int64_t first, std::int64_t n, float* out) const;

  // Throws std::invalid_argument (naming the dataset) unless images is a CPU float32
  // [N, C, H, W] tensor with N == labels.size() >= 1 and every label is in [0, classes).
  void validate() const;
};

struct Splits {
  Dataset train;
  Dataset test;
};

// Builds both splits as the config says (load_dataset.cpp):
//   kind arrays:        train_x/train_y/test_x/test_y from .npy files, an .npz or HDF5
//                       (arrays.hpp);
//   kind fashion-mnist: the four standard gzip IDX files under cfg.path, 10 classes;
//   kind idx:           cfg.train_images / train_labels / test_images / test_labels,
//                       relative to cfg.path unless absolute; classes = max label + 1;
//   kind synthetic:     a Gaussian mixture (synthetic.hpp).
// Then keeps the first train_limit / test_limit examples (0 = all; a limit above the
// split's size keeps the whole split) and normalizes both splits with the statistics
// of the (limited) training split.
// Throws std::invalid_argument for a bad config value (naming the key, e.g.
// "data.kind: unknown kind 'foo' (valid: arrays, fashion-mnist, idx, synthetic)") and
// std::runtime_error for unreadable or malformed files (naming the file).
Splits load_dataset(const DataConfig& cfg);

// An uninitialized CPU float32 tensor for a dataset's images. On Linux it asks for
// transparent huge pages before the memory is first touched: batches gather rows at
// random from ~200 MB, and 2 MB pages remove most of the TLB misses of that (about 20%
// faster gathers measured on Fashion-MNIST). Only a hint: without it nothing changes.
kernels::Tensor allocate_images(kernels::Shape shape);

// Keeps the first n examples (n >= size(): unchanged). Copies the kept rows.
void truncate(Dataset& d, std::int64_t n);

// Computes the normalization of `kind` from `train` (see Normalization) and applies it
// to both splits. `raw_max` is the largest possible raw value (255 for IDX pixels) and
// is what "unit" divides by; pass 1 for data that is already on a unit scale.
Normalization normalize(Splits& splits, const std::string& kind, double raw_max);

// Copies examples indices[0..n) of d into rows 0..n of `images` (CPU float32, shape
// [n, C, H, W], allocated by the caller) and labels[0..n) (resized to n). Throws
// std::invalid_argument on a shape mismatch or an index outside [0, d.size()).
// This is the training hot path: one memcpy per example (or the decoding of its byte row,
// where d.codes is set: a quarter of the memory read), no allocation once `labels` has
// reached its size. `parallel`: the rows are split across the calling thread's OpenMP
// threads (for a caller whose step waits for the batch; a helper thread working beside
// the compute threads should not start a team of its own).
void gather(const Dataset& d, std::span<const std::int64_t> indices, kernels::Tensor& images,
            std::vector<std::int32_t>& labels, bool parallel = false);

}  // namespace codistill::data
