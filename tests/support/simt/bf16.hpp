#pragma once
// cuda_bf16.h's types and conversions for the SIMT executor: __nv_bfloat16 holds the 16
// bits of a bfloat16 (the high half of a float32). Rounding is to nearest even; any NaN
// becomes the canonical 0x7fff, as in CUDA's own host implementation.
#include <cstdint>
#include <cstring>

namespace simt::detail {
inline unsigned short float_to_bf16_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);                      // round half to even
  return static_cast<unsigned short>(u >> 16);
}
inline float bf16_bits_to_float(unsigned short b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
}  // namespace simt::detail

struct alignas(2) __nv_bfloat16 {
  unsigned short x;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : x(simt::detail::float_to_bf16_bits(f)) {}  // implicit, as CUDA's
  operator float() const { return simt::detail::bf16_bits_to_float(x); }
};
struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};

inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short b) {
  __nv_bfloat16 h;
  h.x = b;
  return h;
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  return __ushort_as_bfloat16(simt::detail::float_to_bf16_bits(f));
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return simt::detail::bf16_bits_to_float(h.x); }
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  return {__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}
inline float __low2float(__nv_bfloat162 v) { return __bfloat162float(v.x); }
inline float __high2float(__nv_bfloat162 v) { return __bfloat162float(v.y); }
