// Byte codes of IDX datasets (byte_codes.hpp).
#include "codistill/data/byte_codes.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "codistill/data/dataset.hpp"

namespace codistill::data {
namespace {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(CODISTILL_NO_MULTIVERSIONING)
#define CODISTILL_CODES_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CODISTILL_CODES_CLONES
#endif

// normalize()'s arithmetic per value: (x - shift) * inv in double, rounded to float. Every
// step is one correctly rounded IEEE operation, so vector lanes give the scalar bits.
CODISTILL_CODES_CLONES void decode_span(const std::uint8_t* c, float* out, std::int64_t n, double shift, double inv) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>((static_cast<double>(c[i]) - shift) * inv);
}

// The (shift, inv) normalize() applied; shift 0 and inv 1 when it left the values alone.
void rule(const Dataset& d, double& shift, double& inv) {
  const Normalization& n = d.normalization;
  const bool identity = n.shift == 0.0 && n.scale == 1.0;
  shift = identity ? 0.0 : n.shift;
  inv = identity ? 1.0 : 1.0 / n.scale;
}

}  // namespace

std::vector<std::uint8_t> byte_codes(const Dataset& raw) {
  const std::int64_t n = raw.images.numel();
  const float* x = raw.images.data<float>();
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (!(v >= 0.0f && v <= 255.0f) || v != static_cast<float>(static_cast<int>(v))) return {};
    codes[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v);
  }
  return codes;
}

bool attach_codes(Dataset& d, std::vector<std::uint8_t> codes) {
  d.codes.clear();
  const std::int64_t n = d.images.numel();
  if (n == 0 || codes.size() != static_cast<std::size_t>(n)) return false;
  double shift = 0, inv = 1;
  rule(d, shift, inv);
  const float* x = d.images.data<float>();
  constexpr std::int64_t kChunk = 4096;
  bool same = true;
#pragma omp parallel for schedule(static) reduction(&& : same)
  for (std::int64_t lo = 0; lo < n; lo += kChunk) {
    float buf[kChunk];
    const std::int64_t len = std::min(kChunk, n - lo);
    decode_span(codes.data() + lo, buf, len, shift, inv);
    same = same && std::memcmp(buf, x + lo, static_cast<std::size_t>(len) * sizeof(float)) == 0;
  }
  if (same) d.codes = std::move(codes);
  return same;
}

void decode_codes(const Dataset& d, const std::uint8_t* codes, float* out, std::int64_t n) {
  double shift = 0, inv = 1;
  rule(d, shift, inv);
  decode_span(codes, out, n, shift, inv);
}

}  // namespace codistill::data
