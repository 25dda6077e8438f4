// The synthetic Gaussian mixture: deterministic, right shapes and counts, balanced
// labels, one mixture for every worker, and learnable but not trivial at noise 1.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "codistill/data/dataset.hpp"
#include "codistill/data/synthetic.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using namespace codistill::data;

namespace {

DataConfig synthetic_config() {
  DataConfig cfg;
  cfg.kind = "synthetic";
  cfg.normalize = "none";
  return cfg;
}

bool same_bits(const kernels::Tensor& a, const kernels::Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Accuracy on `test` of the nearest-centroid classifier fitted on `train`: a linear
// classifier, and the Bayes-optimal one for equal isotropic components.
double nearest_centroid_accuracy(const Dataset& train, const Dataset& test) {
  const std::int64_t d = train.example_numel(), k = train.classes;
  std::vector<double> centroid(static_cast<std::size_t>(k * d), 0.0);
  std::vector<double> count(static_cast<std::size_t>(k), 0.0);
  for (std::int64_t i = 0; i < train.size(); ++i) {
    const float* x = train.example(i);
    const auto c = train.labels[i];
    count[c] += 1;
    for (std::int64_t j = 0; j < d; ++j) centroid[c * d + j] += x[j];
  }
  for (std::int64_t c = 0; c < k; ++c)
    for (std::int64_t j = 0; j < d; ++j) centroid[c * d + j] /= count[c];
  std::int64_t right = 0;
  for (std::int64_t i = 0; i < test.size(); ++i) {
    const float* x = test.example(i);
    double best = INFINITY;
    std::int64_t arg = -1;
    for (std::int64_t c = 0; c < k; ++c) {
      double dist = 0;
      for (std::int64_t j = 0; j < d; ++j) dist += (x[j] - centroid[c * d + j]) * (x[j] - centroid[c * d + j]);
      if (dist < best) best = dist, arg = c;
    }
    right += arg == test.labels[i];
  }
  return static_cast<double>(right) / static_cast<double>(test.size());
}

}  // namespace

TEST_CASE("synthetic data: shapes, counts, balanced labels", "[data][synthetic]") {
  DataConfig cfg = synthetic_config();
  cfg.synthetic_shape = {3, 4, 5};
  cfg.synthetic_classes = 7;
  cfg.synthetic_train = 1000;
  cfg.synthetic_test = 301;
  Splits s = load_dataset(cfg);
  s.train.validate();
  s.test.validate();
  CHECK(s.train.images.shape() == kernels::Shape{1000, 3, 4, 5});
  CHECK(s.test.images.shape() == kernels::Shape{301, 3, 4, 5});
  CHECK(s.train.example_shape() == kernels::Shape{3, 4, 5});
  CHECK(s.train.classes == 7);
  CHECK(s.test.classes == 7);
  for (const Dataset* d : {&s.train, &s.test}) {
    std::vector<std::int64_t> counts(7);
    for (auto l : d->labels) counts.at(l)++;  // at(): a label out of range fails loudly
    auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
    CHECK(*hi - *lo <= 1);
    // Random order, not 0, 1, 2, ...: fewer than half the examples keep that pattern.
    std::int64_t in_pattern = 0;
    for (std::int64_t i = 0; i < d->size(); ++i) in_pattern += d->labels[i] == i % 7;
    CHECK(in_pattern < d->size() / 2);
  }
}

TEST_CASE("synthetic data is a function of the config alone", "[data][synthetic]") {
  DataConfig cfg = synthetic_config();
  Splits a = load_dataset(cfg), b = load_dataset(cfg);
  CHECK(same_bits(a.train.images, b.train.images));
  CHECK(same_bits(a.test.images, b.test.images));
  CHECK(a.train.labels == b.train.labels);
  CHECK(a.test.labels == b.test.labels);

  DataConfig other = cfg;
  other.synthetic_seed = cfg.synthetic_seed + 1;
  Splits c = load_dataset(other);
  CHECK_FALSE(same_bits(a.train.images, c.train.images));
  CHECK_FALSE(same_bits(synthetic_means(cfg), synthetic_means(other)));

  // The mixture (and the test split) do not depend on the training split's size or the
  // noise, and nothing in it depends on the run's seed or worker: all workers share it.
  DataConfig resized = cfg;
  resized.synthetic_train = 100;
  resized.synthetic_noise = 3.0;
  CHECK(same_bits(synthetic_means(cfg), synthetic_means(resized)));
  DataConfig fewer = cfg;
  fewer.synthetic_train = 100;
  CHECK(same_bits(load_dataset(fewer).test.images, a.test.images));
}

TEST_CASE("synthetic examples are their class mean plus noise of the configured scale", "[data][synthetic]") {
  DataConfig cfg = synthetic_config();
  cfg.synthetic_noise = 0.5;
  Splits s = load_dataset(cfg);
  kernels::Tensor means = synthetic_means(cfg);
  const std::int64_t d = s.train.example_numel();
  double sq = 0;
  for (std::int64_t i = 0; i < s.train.size(); ++i) {
    const float* x = s.train.example(i);
    const float* m = means.data<float>() + s.train.labels[i] * d;
    for (std::int64_t j = 0; j < d; ++j) sq += (x[j] - m[j]) * (x[j] - m[j]);
  }
  // 524288 squared N(0, 0.25) draws: their mean is 0.25 within a fraction of a percent.
  CHECK(sq / static_cast<double>(s.train.images.numel()) == Approx(0.25).epsilon(0.01));
  // Means at the documented scale: components of variance separation^2 / (2 D).
  double msq = 0;
  for (std::int64_t i = 0; i < means.numel(); ++i) msq += double(means.data<float>()[i]) * means.data<float>()[i];
  CHECK(msq / static_cast<double>(means.numel()) == Approx(kSyntheticSeparation * kSyntheticSeparation / (2.0 * d)).epsilon(0.2));
}

TEST_CASE("synthetic task is learnable but not trivial at noise 1", "[data][synthetic]") {
  DataConfig cfg = synthetic_config();  // defaults: 10 classes, [1, 8, 8], noise 1
  Splits s = load_dataset(cfg);
  const double acc = nearest_centroid_accuracy(s.train, s.test);
  INFO("nearest-centroid test accuracy " << acc);
  CHECK(acc > 0.6);
  CHECK(acc < 0.95);
  cfg.synthetic_noise = 0.0;  // noise-free: every example is its mean
  Splits exact = load_dataset(cfg);
  CHECK(nearest_centroid_accuracy(exact.train, exact.test) == 1.0);
}

TEST_CASE("synthetic normalization and limits", "[data][synthetic]") {
  DataConfig cfg = synthetic_config();
  Splits raw = load_dataset(cfg);
  SECTION("unit leaves synthetic values as they are") {
    cfg.normalize = "unit";
    Splits u = load_dataset(cfg);
    CHECK(same_bits(u.train.images, raw.train.images));
    CHECK(u.train.normalization.kind == "unit");
  }
  SECTION("standard: train mean 0 and std 1, the test split mapped with the train statistics") {
    cfg.normalize = "standard";
    Splits s = load_dataset(cfg);
    const Normalization& n = s.train.normalization;
    CHECK(n.scale > 0);
    double sum = 0, sq = 0;
    const float* x = s.train.images.data<float>();
    const auto count = static_cast<double>(s.train.images.numel());
    for (std::int64_t i = 0; i < s.train.images.numel(); ++i) sum += x[i], sq += double(x[i]) * x[i];
    CHECK(sum / count == Approx(0).margin(1e-5));
    CHECK(sq / count == Approx(1).epsilon(1e-4));
    for (std::int64_t i : {0, 77, 1000})
      CHECK(s.test.images.data<float>()[i] == Approx((raw.test.images.data<float>()[i] - n.shift) / n.scale));
    CHECK(s.test.normalization.scale == n.scale);
  }
  SECTION("limits keep the first examples") {
    cfg.train_limit = 100;
    cfg.test_limit = 50;
    Splits l = load_dataset(cfg);
    CHECK(l.train.size() == 100);
    CHECK(l.test.size() == 50);
    CHECK(std::memcmp(l.train.images.raw(), raw.train.images.raw(), l.train.images.nbytes()) == 0);
    CHECK(std::equal(l.test.labels.begin(), l.test.labels.end(), raw.test.labels.begin()));
  }
}

TEST_CASE("invalid synthetic settings name their key", "[data][synthetic]") {
  DataConfig cfg = synthetic_config();
  SECTION("shape") {
    cfg.synthetic_shape = {8, 8};
    CHECK_THROWS_WITH(load_dataset(cfg), Catch::Contains("data.synthetic_shape"));
    cfg.synthetic_shape = {1, 0, 8};
    CHECK_THROWS_WITH(load_dataset(cfg), Catch::Contains("data.synthetic_shape"));
  }
  SECTION("classes") {
    cfg.synthetic_classes = 1;
    CHECK_THROWS_WITH(load_dataset(cfg), Catch::Contains("data.synthetic_classes"));
  }
  SECTION("noise") {
    cfg.synthetic_noise = -1;
    CHECK_THROWS_WITH(load_dataset(cfg), Catch::Contains("data.synthetic_noise"));
  }
  SECTION("counts") {
    cfg.synthetic_train = 0;
    CHECK_THROWS_WITH(load_dataset(cfg), Catch::Contains("data.synthetic_train"));
    cfg.synthetic_train = 10;
    cfg.synthetic_test = -5;
    CHECK_THROWS_WITH(load_dataset(cfg), Catch::Contains("data.synthetic_test"));
  }
}
