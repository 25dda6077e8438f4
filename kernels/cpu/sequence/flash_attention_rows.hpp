#pragma once
// The softmax loops of one block step of flash attention's fast path (flash_attention.cpp),
// all always_inline: each is compiled into the ISA copies of the function that calls it
// (kernels/cpu/isa.hpp), where its `omp simd` loops vectorize with vec::exp_nonpositive.
//
// A block step pairs query rows q0.. with key rows k0.. (k0 <= q0, equal block sizes), so
// row r of the block sees the first visible(r) keys of the block, at least one.
//
// With Round (the bf16 path, flash_attention_bf16.cpp) the probabilities and dS leave these
// loops rounded to bf16 (operand(), below), as the GEMMs after them must read them; the sums
// and the dS made from P use the unrounded float32 values (the softmax statistics stay
// float32).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/vec_math.hpp"

namespace codistill::kernels::cpu::flash {

// x as a bf16 GEMM operand: for float, kernels/cpu/bf16.hpp's rule (round to nearest even on
// the bit pattern, subnormals kept, a NaN quieted), written branch-free on the integer bits
// so that it vectorizes inside `omp simd` loops (bf16_round's early return does not); for
// double (the gradient checks' way through the bf16 path's code) x itself.
template <class T>
[[gnu::always_inline]] inline T operand(T x) {
  if constexpr (std::is_same_v<T, float>) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
    const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    const std::uint32_t quiet = (u & 0xffff0000u) | 0x00400000u;
    return std::bit_cast<float>((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
  } else {
    return x;
  }
}

// dst[r * cols + c] = operand(src[r * ld + c]): a tile rounded once as it is loaded,
// contiguous (row stride cols) for the GEMMs that read it.
template <class T>
[[gnu::always_inline]] inline void load_operand(const T* src, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                                                T* dst) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* s = src + r * ld;
    T* d = dst + r * cols;
#pragma omp simd
    for (std::int64_t c = 0; c < cols; ++c) d[c] = operand(s[c]);
  }
}

// The keys of a block of `cols` that query row r (q0 + r) may see: k0 + c <= q0 + r.
[[gnu::always_inline]] inline std::int64_t visible(std::int64_t r, std::int64_t q0, std::int64_t k0,
                                                   std::int64_t cols) {
  return std::min(cols, q0 + r - k0 + 1);
}

// Online softmax over one key block (forward). S [rows, cols] (row stride ld) holds the
// scaled scores and becomes the unnormalized probabilities exp(s - m_new), zero past the
// diagonal; m and l (per row: running max and sum) are updated, and the row of O
// [rows, hd] is rescaled by exp(m_old - m_new) so that O += P V continues its sum.
// m starts at -inf: exp_nonpositive flushes exp(-inf) to 0, so the first block's rescale
// multiplies O and l by 0 (O must start finite: zeros).
template <bool Round, class T>
[[gnu::always_inline]] inline void online_softmax(T* S, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                                                  std::int64_t q0, std::int64_t k0, T* m, T* l, T* O,
                                                  std::int64_t hd) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* s = S + r * ld;
    const std::int64_t n = visible(r, q0, k0, cols);
    T mx = m[r];
#pragma omp simd reduction(max : mx)
    for (std::int64_t c = 0; c < n; ++c) mx = std::max(mx, s[c]);
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t c = 0; c < n; ++c) {
      const T e = vec::exp_nonpositive(s[c] - mx);
      sum += e;
      s[c] = Round ? operand(e) : e;
    }
    for (std::int64_t c = n; c < cols; ++c) s[c] = T(0);
    const T alpha = vec::exp_nonpositive(m[r] - mx);
    l[r] = l[r] * alpha + sum;
    m[r] = mx;
    T* o = O + r * hd;
#pragma omp simd
    for (std::int64_t c = 0; c < hd; ++c) o[c] *= alpha;
  }
}

// Backward of one block step: S (scaled scores) becomes P = exp(s - lse), zero past the
// diagonal, and dP (dy v^T) becomes dS = P (dP - Di), with Di = dy_i . y_i per row. s - lse
// is <= 0 up to rounding (lse >= the row's max), which exp_nonpositive takes.
template <bool Round, class T>
[[gnu::always_inline]] inline void probs_and_dscores(T* S, T* dP, std::int64_t ld, std::int64_t rows,
                                                     std::int64_t cols, std::int64_t q0, std::int64_t k0,
                                                     const T* lse, const T* Di) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T *s = S + r * ld, *dp = dP + r * ld;
    const std::int64_t n = visible(r, q0, k0, cols);
    const T shift = lse[r], di = Di[r];
#pragma omp simd
    for (std::int64_t c = 0; c < n; ++c) {
      const T p = vec::exp_nonpositive(s[c] - shift), ds = p * (dp[c] - di);
      s[c] = Round ? operand(p) : p;
      dp[c] = Round ? operand(ds) : ds;
    }
    for (std::int64_t c = n; c < cols; ++c) s[c] = dp[c] = T(0);
  }
}

}  // namespace codistill::kernels::cpu::flash
