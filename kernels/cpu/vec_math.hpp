#pragma once
// exp and log that GCC can vectorize inside `#pragma omp simd` loops, for float and double.
//
// Why not std::exp: it is an opaque libm call, so a loop that calls it runs one element
// at a time (libmvec would need -ffast-math), and the default build may not use
// -march=native. These are plain inline arithmetic: called from a function compiled
// with __attribute__((target(...))) they are inlined and vectorized for that ISA (see the
// dispatch in distill_loss.cpp), and from a plain function they vectorize with SSE2.
//
// Rules that keep them vectorizable: no branches and no libm calls; type punning through
// std::bit_cast; clamps done on the integer bit patterns. A float select against a
// constant (x < lo ? lo : x) lets GCC's PRE specialise the constant path under the default
// -ftrapping-math, and the resulting control flow stops if-conversion on AVX2/SSE.
//
// Accuracy against libm, the largest error on tests/kernels/cpu/test_vec_math.cpp's inputs
// in every ISA copy: exp of x <= 0 1.3 ulp (float and double), log 2.9 ulp. The log keeps
// its division (u below): a division-free polynomial in m - 1 (0.9 ulp) measured 1.6%
// slower on the K = 4 loss (four more FMAs per element).
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace codistill::kernels::cpu::vec {

namespace detail {

// 1/k! for k = 0..N-1 (Taylor coefficients of exp), computed in double at compile time.
template <class T, std::size_t N>
constexpr std::array<T, N> exp_taylor() {
  std::array<T, N> c{};
  double f = 1;
  for (std::size_t k = 0; k < N; ++k) {
    if (k > 0) f *= static_cast<double>(k);
    c[k] = static_cast<T>(1.0 / f);
  }
  return c;
}

// 1/(2k+1) for k = 0..N-1: log(m) = 2u * sum_k u^(2k) / (2k+1) with u = (m-1)/(m+1).
template <class T, std::size_t N>
constexpr std::array<T, N> log_coefficients() {
  std::array<T, N> c{};
  for (std::size_t k = 0; k < N; ++k) c[k] = static_cast<T>(1.0 / static_cast<double>(2 * k + 1));
  return c;
}

// Horner's rule, c[0] + x (c[1] + x (...)); the constant trip count is fully unrolled
// by GCC before vectorization.
template <class T, std::size_t N>
[[gnu::always_inline]] inline T horner(T x, const std::array<T, N>& c) {
  T p = c[N - 1];
  for (std::size_t i = N - 1; i-- > 0;) p = p * x + c[i];
  return p;
}

}  // namespace detail

template <class T>
struct Traits;

template <>
struct Traits<float> {
  using I = std::int32_t;
  using U = std::uint32_t;
  static constexpr int kMantissa = 23, kBias = 127;
  // Adding 1.5 * 2^23 rounds a float in (-2^22, 2^22) to an integer held in the low
  // mantissa bits: bits(x + kRound) - bits(kRound) == rint(x).
  static constexpr float kRound = 12582912.0f;
  // exp(x) for x below this is flushed to 0: rint(-88 / ln 2) = -127 makes the scale
  // factor's exponent field 0, i.e. the factor itself +0.
  static constexpr float kExpFloor = -88.0f;
  // Cody-Waite split of ln 2: n * kLn2Hi is exact for |n| < 2^15.
  static constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  // exp(r) on |r| <= ln2/2: degree-6 polynomial with minimax (Remez exchange, relative
  // error) coefficients, 1.9e-9 relative before rounding; one FMA cheaper than the
  // degree-7 Taylor polynomial of the same accuracy, and this loop is the hot one.
  static constexpr std::array<float, 7> kExpPoly = {
      1.0000000005541663f, 1.0000000363231765f, 0.49999992079828019f, 0.16666420169946367f,
      0.041668225566922838f, 0.0083748157983017933f, 0.0013836846134577056f};
  static constexpr std::size_t kLogTerms = 5;  // atanh series to u^9: 1e-9 on |u| < 0.172
  static constexpr U kSqrtHalfBits = 0x3F3504F3u;  // bits of sqrt(1/2)
};

template <>
struct Traits<double> {
  using I = std::int64_t;
  using U = std::uint64_t;
  static constexpr int kMantissa = 52, kBias = 1023;
  static constexpr double kRound = 6755399441055744.0;  // 1.5 * 2^52
  static constexpr double kExpFloor = -709.0;           // rint(-709 / ln 2) = -1023
  static constexpr double kLn2Hi = 6.93147180369123816490e-01;
  static constexpr double kLn2Lo = 1.90821492927058770002e-10;
  static constexpr std::array<double, 14> kExpPoly = detail::exp_taylor<double, 14>();  // 4e-18
  static constexpr std::size_t kLogTerms = 11;  // to u^21: 2e-19 on |u| < 0.172
  static constexpr U kSqrtHalfBits = 0x3FE6A09E667F3BCDull;
};

namespace detail {
template <class T>
inline constexpr auto kLogCoeffs = log_coefficients<T, Traits<T>::kLogTerms>();
}  // namespace detail

// exp(x) for x <= 0 (the loss only ever exponentiates shifted logits, x - max <= 0).
// 0 where rint(x / ln 2) makes the scale factor's exponent field 0 (x below about -87.7 for
// float, -708.7 for double); just above that the product can be subnormal. Not valid for
// x > 0 beyond ~80.
template <class T>
[[gnu::always_inline]] inline T exp_nonpositive(T x) {
  using C = Traits<T>;
  using I = typename C::I;
  using U = typename C::U;
  // min over the unsigned bit patterns: for x <= 0 (and for +0, whose pattern is 0)
  // it is max(x, kExpFloor) as floats, without a float compare.
  const U xb = std::bit_cast<U>(x), fb = std::bit_cast<U>(C::kExpFloor);
  const T xc = std::bit_cast<T>(xb < fb ? xb : fb);
  const T shifted = xc * T(1.44269504088896340736) + C::kRound;  // x / ln 2 + round const
  const T n = shifted - C::kRound;                              // rint(x / ln 2)
  const T r = (xc - n * C::kLn2Hi) - n * C::kLn2Lo;             // |r| <= ln2 / 2
  const I ni = std::bit_cast<I>(shifted) - std::bit_cast<I>(C::kRound);
  const T scale = std::bit_cast<T>(static_cast<I>((ni + C::kBias) << C::kMantissa));  // 2^n
  return detail::horner(r, C::kExpPoly) * scale;
}

// log(x) for x in [0, max]; 0, -0 and denormals (and any negative x) are clamped to the
// smallest normal, so that q * log(q) is 0 for q = 0 rather than NaN. +inf and NaN give
// finite values: the loss multiplies the result by q, which carries them.
template <class T>
[[gnu::always_inline]] inline T log_nonnegative(T x) {
  using C = Traits<T>;
  using I = typename C::I;
  // A signed compare of the bit patterns: -0 (the sign bit alone) clamps too, as 0 does.
  const I xb = std::bit_cast<I>(x), lb = std::bit_cast<I>(std::numeric_limits<T>::min());
  const I bits = xb > lb ? xb : lb;
  // x = 2^k * m with m in [sqrt(1/2), sqrt(2)): shift the exponent boundary by sqrt(1/2).
  const I k = (bits - static_cast<I>(C::kSqrtHalfBits)) >> C::kMantissa;
  const T m = std::bit_cast<T>(static_cast<I>(bits - (k << C::kMantissa)));
  const T u = (m - T(1)) / (m + T(1));
  const T log_m = T(2) * u * detail::horner(u * u, detail::kLogCoeffs<T>);
  // k as a float through the rounding constant: an int64 -> double conversion would
  // not vectorize below AVX-512DQ.
  const T kf = std::bit_cast<T>(static_cast<I>(k + std::bit_cast<I>(C::kRound))) - C::kRound;
  return kf * C::kLn2Hi + (kf * C::kLn2Lo + log_m);
}

// term, or +0 where x <= 0 even where term is NaN: 0 log 0 = 0 for a probability x that is
// 0 (masked or underflowed), whatever its 0 * inf gives. A NaN x keeps term, so a NaN input
// still shows in the result. Bit operations on purpose: GCC does not if-convert
// `x > 0 ? term : 0` when term is a floating-point expression (-ftrapping-math forbids
// evaluating it speculatively) unless AVX-512 masking can, so that select left the loss's
// AVX2 and SSE2 loops scalar (2-3x slower); an integer mask vectorizes on every ISA.
template <class T>
[[gnu::always_inline]] inline T zero_where_nonpositive(T x, T term) {
  using U = typename Traits<T>::U;
  const U mask = x <= T(0) ? U(0) : ~U(0);
  return std::bit_cast<T>(std::bit_cast<U>(term) & mask);
}

}  // namespace codistill::kernels::cpu::vec
