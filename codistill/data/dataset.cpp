#include "codistill/data/dataset.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "codistill/data/byte_codes.hpp"

namespace codistill::data {

kernels::Shape Dataset::shape() const { return is_mapped() ? mapped_shape : images.shape(); }

kernels::Shape Dataset::example_shape() const {
  const kernels::Shape s = shape();
  return s.empty() ? s : kernels::Shape(s.begin() + 1, s.end());
}

std::int64_t Dataset::example_numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : example_shape()) n *= d;
  return shape().empty() ? 0 : n;
}

const float* Dataset::example(std::int64_t i) const { return images.data<float>() + i * example_numel(); }

const std::uint8_t* Dataset::code_bytes() const {
  if (is_mapped()) return mapped.data();
  return codes.empty() ? nullptr : codes.data();
}

void Dataset::copy_rows(std::int64_t first, std::int64_t n, float* out) const {
  const std::int64_t row = example_numel();
  if (const std::uint8_t* c = code_bytes()) {
    decode_codes(*this, c + first * row, out, n * row);
    return;
  }
  std::memcpy(out, example(first), static_cast<std::size_t>(n * row) * sizeof(float));
}

void Dataset::validate() const {
  auto bad = [&](const std::string& what) { throw std::invalid_argument("dataset '" + name + "': " + what); };
  if (is_mapped()) {
    if (mapped_shape.size() != 4 || mapped_shape[0] != size() ||
        static_cast<std::int64_t>(mapped.size()) != size() * example_numel())
      bad("mapped bytes do not match shape " + kernels::shape_str(mapped_shape) + " and " +
          std::to_string(size()) + " labels");
  } else {
    if (!images.defined()) bad("no images");
    if (images.dtype() != kernels::DType::f32 || !images.device().is_cpu())
      bad(std::string("images must be float32 on the CPU, got ") + kernels::dtype_name(images.dtype()) + " on " +
          images.device().str());
    if (images.ndim() != 4) bad("images must be [N, C, H, W], got " + kernels::shape_str(images.shape()));
    if (images.dim(0) != size())
      bad(std::to_string(images.dim(0)) + " images but " + std::to_string(size()) + " labels");
  }
  if (size() < 1) bad("zero examples");
  if (classes < 1) bad("classes must be >= 1, got " + std::to_string(classes));
  for (std::size_t i = 0; i < labels.size(); ++i)
    if (labels[i] < 0 || labels[i] >= classes)
      bad("label " + std::to_string(labels[i]) + " at index " + std::to_string(i) + " is out of range for " +
          std::to_string(classes) + " classes");
}

kernels::Tensor allocate_images(kernels::Shape shape) {
  kernels::Tensor t = kernels::Tensor::empty(std::move(shape));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // madvise needs page-aligned bounds: advise the whole pages inside the buffer.
  constexpr std::uintptr_t kPage = 4096;
  auto begin = (reinterpret_cast<std::uintptr_t>(t.raw()) + kPage - 1) & ~(kPage - 1);
  auto end = (reinterpret_cast<std::uintptr_t>(t.raw()) + t.nbytes()) & ~(kPage - 1);
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // a hint only
#endif
  return t;
}

void truncate(Dataset& d, std::int64_t n) {
  if (n < 1) throw std::invalid_argument("truncate: keep at least one example, got " + std::to_string(n));
  if (n >= d.size()) return;
  if (d.is_mapped()) {  // a view: keep its first n rows
    d.mapped = d.mapped.first(static_cast<std::size_t>(n * d.example_numel()));
    d.mapped_shape[0] = n;
    d.labels.resize(static_cast<std::size_t>(n));
    return;
  }
  kernels::Shape shape = d.images.shape();
  shape[0] = n;
  kernels::Tensor kept = allocate_images(shape);
  std::memcpy(kept.raw(), d.images.raw(), kept.nbytes());
  d.images = std::move(kept);
  d.labels.resize(static_cast<std::size_t>(n));
  d.codes.resize(std::min(d.codes.size(), static_cast<std::size_t>(n * d.example_numel())));
}

Normalization normalize(Splits& splits, const std::string& kind, double raw_max) {
  Normalization norm;
  norm.kind = kind;
  if (kind == "standard") {
    // One scalar mean and std over every value of the training split (not per pixel):
    // per-pixel statistics would divide the always-black border pixels of MNIST-like
    // images by ~0. Sums in double: 47M floats in float would lose digits.
    // Mapped bytes: the same sums over the same values in the same order (a byte's float is
    // exact), so a mapped dataset normalizes bit for bit as its float copy would.
    const Dataset& t = splits.train;
    const std::int64_t n = t.is_mapped() ? static_cast<std::int64_t>(t.mapped.size()) : t.images.numel();
    auto at = [&, x = t.is_mapped() ? nullptr : t.images.data<float>()](std::int64_t i) {
      return x ? x[i] : static_cast<float>(t.mapped[static_cast<std::size_t>(i)]);
    };
    double sum = 0;
    for (std::int64_t i = 0; i < n; ++i) sum += at(i);
    const double mean = sum / static_cast<double>(n);
    double sq = 0;
    for (std::int64_t i = 0; i < n; ++i) sq += (at(i) - mean) * (at(i) - mean);
    const double stdev = std::sqrt(sq / static_cast<double>(n));
    norm.shift = mean;
    // A constant training split has std 0: only centre it (the values all become 0)
    // instead of dividing by zero.
    norm.scale = stdev > 0 && std::isfinite(stdev) ? stdev : 1.0;
  } else if (kind == "unit") {
    norm.scale = raw_max;
  } else if (kind != "none") {
    throw std::invalid_argument("data.normalize: unknown value '" + kind + "' (valid: standard, unit, none)");
  }
  for (Dataset* d : {&splits.train, &splits.test}) {
    d->normalization = norm;
    d->codes.clear();  // they stood for the values before
    if (d->is_mapped()) continue;  // decoded under the new normalization as they are read
    if (norm.shift == 0.0 && norm.scale == 1.0) continue;
    float* x = d->images.data<float>();
    const std::int64_t n = d->images.numel();
    const double shift = norm.shift, inv = 1.0 / norm.scale;
    for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<float>((x[i] - shift) * inv);
  }
  return norm;
}

void gather(const Dataset& d, std::span<const std::int64_t> indices, kernels::Tensor& images,
            std::vector<std::int32_t>& labels, bool parallel) {
  const auto n = static_cast<std::int64_t>(indices.size());
  const kernels::Shape want = d.shape();
  const auto& got = images.shape();
  bool ok = images.dtype() == kernels::DType::f32 && images.device().is_cpu() && got.size() == want.size() &&
            !got.empty() && got[0] == n && std::equal(got.begin() + 1, got.end(), want.begin() + 1);
  if (!ok) {
    kernels::Shape expected = want;
    if (!expected.empty()) expected[0] = n;
    throw std::invalid_argument("gather from '" + d.name + "': expected a CPU float32 tensor of shape " +
                                kernels::shape_str(expected) + ", got " + kernels::dtype_name(images.dtype()) + " " +
                                kernels::shape_str(got) + " on " + images.device().str());
  }
  const std::int64_t row = d.example_numel();
  const std::size_t row_bytes = static_cast<std::size_t>(row) * sizeof(float);
  const std::uint8_t* codes = d.code_bytes();
  const float* src = codes ? nullptr : d.images.data<float>();
  float* dst = images.data<float>();
  labels.resize(static_cast<std::size_t>(n));
  const std::int64_t size = d.size();
  for (std::int64_t i = 0; i < n; ++i)
    if (indices[i] < 0 || indices[i] >= size)
      throw std::invalid_argument("gather from '" + d.name + "': index " + std::to_string(indices[i]) +
                                  " out of range [0, " + std::to_string(size) + ")");
  // Rows come from random places in a large array: ask for the start of the row a few
  // examples ahead so that its first cache miss overlaps the current copy (the hardware
  // prefetcher follows a row once it has started). ~25% faster on Fashion-MNIST batches.
  // In parallel (a training batch of fmnist_mlp, 128 rows of 3 KB: 30 -> 17 us on two threads)
  // each thread copies a contiguous block of rows (its look-ahead may touch the next
  // block's first rows: a hint only).
  constexpr std::int64_t kAhead = 4;
  const bool par = parallel && n >= 16 && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t k = indices[i];
    if (codes) {
      // A byte row is a few cache lines: ask for all of the one kAhead rows on.
      if (i + kAhead < n)
        for (std::int64_t b = 0; b < row; b += 64) __builtin_prefetch(codes + indices[i + kAhead] * row + b);
      decode_codes(d, codes + k * row, dst + i * row, row);
    } else {
      if (i + kAhead < n) __builtin_prefetch(src + indices[i + kAhead] * row);
      std::memcpy(dst + i * row, src + k * row, row_bytes);
    }
    labels[i] = d.labels[k];
  }
}

}  // namespace codistill::data
