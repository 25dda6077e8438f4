#include "codistill/data/synthetic.hpp"

#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

#include "codistill/util/rng.hpp"

namespace codistill::data {

namespace {

// Per-split streams of Rng(seed, split): the means use Rng(seed) itself.
constexpr std::uint64_t kTrainStream = 1;
constexpr std::uint64_t kTestStream = 2;
// Cap on the floats of one split, to turn a typo (synthetic_train: 1e12) into an error
// rather than an allocation failure: 2^31 floats = 8 GiB.
constexpr std::int64_t kMaxFloats = std::int64_t{1} << 31;

[[noreturn]] void bad(const std::string& key, const std::string& what) {
  throw std::invalid_argument("data." + key + ": " + what);
}

// Validates the synthetic_* keys; returns D = C * H * W.
std::int64_t check_config(const DataConfig& cfg) {
  const auto& shape = cfg.synthetic_shape;
  if (shape.size() != 3) bad("synthetic_shape", "expected 3 values [C, H, W], got " + std::to_string(shape.size()));
  std::int64_t d = 1;
  for (auto s : shape) {
    if (s <= 0) bad("synthetic_shape", "every dimension must be positive, got " + kernels::shape_str(shape));
    if (s > kMaxFloats / d) bad("synthetic_shape", "too large: " + kernels::shape_str(shape));
    d *= s;
  }
  if (cfg.synthetic_classes < 2 || cfg.synthetic_classes > 1000)
    bad("synthetic_classes", "must be in [2, 1000], got " + std::to_string(cfg.synthetic_classes));
  if (!std::isfinite(cfg.synthetic_noise) || cfg.synthetic_noise < 0)
    bad("synthetic_noise", "must be a finite value >= 0, got " + std::to_string(cfg.synthetic_noise));
  for (auto [key, n] : {std::pair{"synthetic_train", cfg.synthetic_train}, std::pair{"synthetic_test", cfg.synthetic_test}}) {
    if (n <= 0) bad(key, "must be >= 1, got " + std::to_string(n));
    if (n > kMaxFloats / d)
      bad(key, std::to_string(n) + " examples of " + std::to_string(d) + " values exceed 2^31 floats");
  }
  return d;
}

Dataset make_split(const DataConfig& cfg, const kernels::Tensor& means, std::int64_t n, std::uint64_t stream,
                   const char* split) {
  const std::int64_t d = means.numel() / cfg.synthetic_classes;
  const auto& s = cfg.synthetic_shape;
  Rng rng(cfg.synthetic_seed, stream);

  Dataset out;
  out.name = std::string("synthetic/") + split;
  out.classes = cfg.synthetic_classes;
  // Balanced labels: 0, 1, ..., K-1, 0, 1, ... then shuffled.
  out.labels.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out.labels[i] = static_cast<std::int32_t>(i % cfg.synthetic_classes);
  shuffle(out.labels.begin(), static_cast<std::uint64_t>(n), rng);

  out.images = allocate_images({n, s[0], s[1], s[2]});
  float* x = out.images.data<float>();
  const float* m = means.data<float>();
  const double noise = cfg.synthetic_noise;
  for (std::int64_t i = 0; i < n; ++i) {
    const float* mean = m + out.labels[i] * d;
    float* row = x + i * d;
    for (std::int64_t j = 0; j < d; ++j) row[j] = static_cast<float>(mean[j] + noise * rng.normal());
  }
  return out;
}

}  // namespace

kernels::Tensor synthetic_means(const DataConfig& cfg) {
  const std::int64_t d = check_config(cfg);
  const auto& s = cfg.synthetic_shape;
  kernels::Tensor means = kernels::Tensor::empty({cfg.synthetic_classes, s[0], s[1], s[2]});
  Rng rng(cfg.synthetic_seed);
  const double scale = kSyntheticSeparation / std::sqrt(2.0 * static_cast<double>(d));
  float* m = means.data<float>();
  for (std::int64_t i = 0; i < means.numel(); ++i) m[i] = static_cast<float>(scale * rng.normal());
  return means;
}

Splits make_synthetic(const DataConfig& cfg) {
  kernels::Tensor means = synthetic_means(cfg);  // validates cfg
  Splits out;
  out.train = make_split(cfg, means, cfg.synthetic_train, kTrainStream, "train");
  out.test = make_split(cfg, means, cfg.synthetic_test, kTestStream, "test");
  return out;
}

}  // namespace codistill::data
