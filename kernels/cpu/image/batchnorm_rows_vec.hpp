#pragma once
// The float32 loops of batchnorm_rows.cpp for channel counts that are multiples of 16 (every
// ResNet width here), written with GCC vector types: 16 channels of a row are one vector, so
// they compile to one AVX-512 instruction per operation in the AVX-512 copy (two in the
// AVX2 one, four in baseline SSE2) whatever the auto-vectorizer makes of a 16-iteration
// loop (it unrolled them and then left the double-precision dx pass scalar). Private to
// batchnorm_rows.cpp; everything is always_inline, so it is compiled for the ISA of the
// function it lands in.
#include <cstdint>
#include <cstring>

#define CODISTILL_BN_INLINE inline __attribute__((always_inline))

// Vectors passed by value between always_inline functions never reach a call boundary, so
// GCC's note that their calling convention depends on the ISA does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace codistill::kernels::cpu::bn_rows_vec {

typedef float vf16 __attribute__((vector_size(64)));
typedef float vf8 __attribute__((vector_size(32)));
typedef double vd8 __attribute__((vector_size(64)));

constexpr std::int64_t kLanes = 16;  // channels per vector (float)

template <class V, class T>
CODISTILL_BN_INLINE V load(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof v);  // one unaligned load
  return v;
}
template <class V, class T>
CODISTILL_BN_INLINE void store(T* p, V v) {
  std::memcpy(p, &v, sizeof v);
}

// dy where y > 0, else 0 (relu_backward's rule), or dy itself.
template <bool Relu, class V>
CODISTILL_BN_INLINE V dz_of(V dy, const float* y) {
  if constexpr (Relu) {
    const V yv = load<V>(y);
    return yv > V{} ? dy : V{};
  }
  return dy;
}

// Sums of rows [r0, r1) for G vectors of channels from c0 (8 doubles per half vector),
// accumulated in double across the rows and added to a[c], b[c] at the end. Forward: d =
// x - K and d^2; backward: dz and dz * xh, xh = (x - mean) invstd. Double, not float, though
// the passes are bound by memory either way: dx is a small difference of terms built from
// these statistics (at two values per channel, only eps keeps it from zero), and float sums
// (a ulp of invstd, 6e-8 of xh) showed through it past the op tests' bound.
template <int G, bool Backward, bool Relu>
CODISTILL_BN_INLINE void sums(const float* x, const float* y, const float* dy, const float* center,
                              const float* invstd, std::int64_t r0, std::int64_t r1, std::int64_t C, std::int64_t c0,
                              double* a, double* b) {
  constexpr int H = 2 * G;
  vd8 sa[H], sb[H], ctr[H], is[H];
  for (int h = 0; h < H; ++h) {
    sa[h] = vd8{}, sb[h] = vd8{};
    ctr[h] = __builtin_convertvector(load<vf8>(center + c0 + h * 8), vd8);
    if constexpr (Backward) is[h] = __builtin_convertvector(load<vf8>(invstd + c0 + h * 8), vd8);
  }
  for (std::int64_t r = r0; r < r1; ++r)
    for (int h = 0; h < H; ++h) {
      const std::int64_t o = r * C + c0 + h * 8;
      const vd8 xv = __builtin_convertvector(load<vf8>(x + o), vd8);
      if constexpr (!Backward) {
        const vd8 d = xv - ctr[h];
        sa[h] += d;
        sb[h] += d * d;
      } else {
        const vd8 d = __builtin_convertvector(dz_of<Relu>(load<vf8>(dy + o), Relu ? y + o : nullptr), vd8);
        sa[h] += d;
        sb[h] += d * ((xv - ctr[h]) * is[h]);
      }
    }
  for (int h = 0; h < H; ++h)
    for (int l = 0; l < 8; ++l) {
      a[c0 + h * 8 + l] += sa[h][l];
      b[c0 + h * 8 + l] += sb[h][l];
    }
}

// y = x * scale + shift (then relu) over rows [r0, r1).
template <bool Relu>
CODISTILL_BN_INLINE void normalize(const float* x, float* y, const float* scale, const float* shift, std::int64_t r0,
                                   std::int64_t r1, std::int64_t C) {
  for (std::int64_t r = r0; r < r1; ++r)
    for (std::int64_t c = 0; c < C; c += kLanes) {
      const std::int64_t o = r * C + c;
      vf16 v = load<vf16>(x + o) * load<vf16>(scale + c) + load<vf16>(shift + c);
      if constexpr (Relu) v = v > vf16{} ? v : vf16{};  // NaN -> 0, as relu_forward
      store(y + o, v);
    }
}

// dx over rows [r0, r1), 8 channels at a time in double: training dx = g (dz - mdz - (x -
// mean) is mdzxh) (the reference's grouping), eval dx = g dz.
template <bool Relu, bool Training>
CODISTILL_BN_INLINE void dx(const float* x, const float* y, const float* dy, float* out, const double* g,
                            const double* mdz, const double* mdzxh, const double* mean, const double* is,
                            std::int64_t r0, std::int64_t r1, std::int64_t C) {
  for (std::int64_t r = r0; r < r1; ++r)
    for (std::int64_t c = 0; c < C; c += 8) {
      const std::int64_t o = r * C + c;
      vd8 v = __builtin_convertvector(dz_of<Relu>(load<vf8>(dy + o), Relu ? y + o : nullptr), vd8);
      if constexpr (Training) {
        const vd8 xv = __builtin_convertvector(load<vf8>(x + o), vd8);
        v = v - load<vd8>(mdz + c) - (xv - load<vd8>(mean + c)) * load<vd8>(is + c) * load<vd8>(mdzxh + c);
      }
      store(out + o, __builtin_convertvector(load<vd8>(g + c) * v, vf8));
    }
}

}  // namespace codistill::kernels::cpu::bn_rows_vec
