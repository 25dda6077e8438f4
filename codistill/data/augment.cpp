#include "codistill/data/augment.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "codistill/data/dataset.hpp"
#include "codistill/util/rng.hpp"

namespace codistill::data {

namespace {
// The purpose word of the augmentation stream (the trainer's model-init stream is 1):
// distinct purposes keep streams apart for the same (seed, worker).
constexpr std::uint64_t kAugmentPurpose = 0x617567;  // "aug"
}  // namespace

AugmentDraw augment_draw(const AugmentOptions& options, std::int64_t step, std::int64_t row) {
  // Two levels: (seed, worker, purpose) gives this worker's key, (key, step, row) the
  // example's own generator. A fixed number of draws in a fixed order per example.
  const std::uint64_t key = Rng(options.seed, static_cast<std::uint64_t>(options.worker), kAugmentPurpose).next_u64();
  Rng rng(key, static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(row));
  AugmentDraw d;
  if (options.crop_padding > 0) {
    const auto span = static_cast<std::uint64_t>(2 * options.crop_padding + 1);
    d.dy = static_cast<std::int64_t>(rng.below(span));
    d.dx = static_cast<std::int64_t>(rng.below(span));
  } else {
    d.dy = d.dx = 0;
  }
  if (options.flip) d.flip = (rng.next_u64() >> 63) != 0;
  return d;
}

void augment_batch(const AugmentOptions& options, kernels::Tensor& images, std::int64_t step,
                   std::int64_t first_row) {
  if (!options.enabled()) return;
  if (images.dtype() != kernels::DType::f32 || !images.device().is_cpu() || images.shape().size() != 4)
    throw std::invalid_argument("augment_batch: expected a CPU float32 [n, C, H, W] tensor, got " +
                                kernels::shape_str(images.shape()));
  const std::int64_t n = images.shape()[0], C = images.shape()[1], H = images.shape()[2], W = images.shape()[3];
  const std::int64_t p = options.crop_padding, plane = H * W, numel = C * plane;
  std::vector<float> src(static_cast<std::size_t>(numel));
  float* base = images.data<float>();
  for (std::int64_t r = 0; r < n; ++r) {
    const AugmentDraw d = augment_draw(options, step, first_row + r);
    const std::int64_t oy = d.dy - p, ox = d.dx - p;  // source offset of the window
    if (oy == 0 && ox == 0 && !d.flip) continue;      // the identity
    float* ex = base + r * numel;
    std::copy(ex, ex + numel, src.begin());
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t y = 0; y < H; ++y) {
        float* out = ex + c * plane + y * W;
        const std::int64_t sy = y + oy;
        if (sy < 0 || sy >= H) {
          std::fill(out, out + W, options.fill);
          continue;
        }
        const float* in = src.data() + c * plane + sy * W;
        for (std::int64_t x = 0; x < W; ++x) {
          const std::int64_t sx = (d.flip ? W - 1 - x : x) + ox;
          out[x] = sx >= 0 && sx < W ? in[sx] : options.fill;
        }
      }
  }
}

}  // namespace codistill::data
