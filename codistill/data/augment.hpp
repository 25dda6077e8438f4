#pragma once
// Training-time image augmentation (data.augment): a random crop of a zero-padded image
// and a random horizontal flip, applied to training batches only (never to evaluation
// batches; teachers see the augmented batch, the very input tensor the student sees).
//
// Randomness is counter-based: the draws for one example are a pure function of
// (run seed, worker, step, row of the example in the step's batch), through a generator
// seeded from those four numbers. So augmentation holds no state: nothing goes into a
// checkpoint, a resumed run (kill -9 included) draws exactly what the uninterrupted run
// drew at the same step, and a batch prepared early on a helper thread (prefetch) or in
// micro-batches (the row is the row in the whole batch) is augmented identically.
//
// The crop: the C x H x W image is padded with `pad` pixels on every side with the value
// `fill`, and an H x W window is cut at an offset (dy, dx) drawn uniformly from
// [0, 2 * pad]^2, i.e.  out[c][y][x] = in[c][y + dy - pad][x + dx - pad], or `fill` where
// that falls outside the image. dy = dx = pad is the identity. The flip (probability 1/2)
// then mirrors the result: out[c][y][x] = cropped[c][y][W - 1 - x].
#include <cstdint>
#include <span>

#include "codistill/data/data_options.hpp"
#include "kernels/tensor.hpp"

namespace codistill::data {

struct Normalization;

struct AugmentOptions {
  std::int64_t crop_padding = 0;  // 0: no crop
  bool flip = false;
  float fill = 0.0f;              // the padding value, in the stored (normalized) scale
  std::uint64_t seed = 1;         // the run seed
  int worker = 0;

  bool enabled() const { return crop_padding > 0 || flip; }
};


// One example's draws.
struct AugmentDraw {
  std::int64_t dy = 0, dx = 0;  // crop offsets in [0, 2 * crop_padding]
  bool flip = false;
};
AugmentDraw augment_draw(const AugmentOptions& options, std::int64_t step, std::int64_t row);

// Augments rows [0, n) of `images` (CPU float32 [n, C, H, W]) in place; row r is row
// first_row + r of step `step`'s batch. A no-op when !options.enabled(). Throws
// std::invalid_argument for a tensor that is not a CPU float32 [n, C, H, W] one.
void augment_batch(const AugmentOptions& options, kernels::Tensor& images, std::int64_t step,
                   std::int64_t first_row);

}  // namespace codistill::data
