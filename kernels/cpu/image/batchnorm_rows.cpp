#include "kernels/cpu/image/batchnorm_rows.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/cpu/image/batchnorm_layout.hpp"
#include "kernels/cpu/image/batchnorm_rows_vec.hpp"
#include "kernels/cpu/isa.hpp"

#define CODISTILL_ALWAYS_INLINE inline __attribute__((always_inline))

namespace codistill::kernels::cpu {
namespace {

// Rows per chunk: fixed, so the order of the sums is too; the chunk is also the unit of work
// handed to a thread and to one call of the ISA-specific loops.
constexpr std::int64_t kChunk = 256;
// Channels per block of a chunk's accumulators in the general loops (on the stack).
constexpr std::int64_t kBlock = 64;

bool parallel(const BatchNormShape& s) {
  return s.batch * s.channels >= batchnorm_layout::kParallelMin && !omp_in_parallel();
}

// One pass over some rows of the [rows, C] tensors; `kind` says which.
template <class T>
struct Pass {
  enum Kind { forward_sums, normalize, backward_sums, backward_dx, eval_dx } kind = forward_sums;
  std::int64_t C = 0;
  const T* x = nullptr;
  const T* dy = nullptr;
  const T* relu_y = nullptr;  // the fused relu's output: dz = dy * [y > 0]; null: dz = dy
  T* out = nullptr;           // normalize: y; the dx passes: dx
  // forward_sums: center = row 0 (the shift); backward_sums: center = mean, invstd.
  const T* center = nullptr;
  const T* invstd = nullptr;
  const T* scale = nullptr;  // normalize: y = x * scale + shift, then relu if `relu`
  const T* shift = nullptr;
  bool relu = false;
  // backward_dx: dx = g (dz - mdz - (x - mean) is mdzxh), all per channel in double (the
  // reference's formula: dx nearly cancels, and another grouping shows at M = 2); eval_dx:
  // dx = g dz.
  const double* g = nullptr;
  const double* mdz = nullptr;
  const double* mdzxh = nullptr;
  const double* mean = nullptr;
  const double* is = nullptr;
};

template <bool Relu, class T>
CODISTILL_ALWAYS_INLINE T dz_of(const T* dy, const T* y, std::int64_t c) {
  const T d = dy[c];  // loaded unconditionally: a conditional load would not vectorize
  if constexpr (Relu) return y[c] > T(0) ? d : T(0);
  return d;
}

// The general loops (float64, and channel counts that are not a multiple of 16): rows
// [r0, r1), channels in blocks of at most kBlock, sums in double (why: batchnorm_rows_vec.hpp).
template <bool Backward, bool Relu, class T>
CODISTILL_ALWAYS_INLINE void sums_block(const Pass<T>& p, std::int64_t r0, std::int64_t r1, std::int64_t c0,
                                        std::int64_t w, double* a, double* b) {
  double sa[kBlock] = {}, sb[kBlock] = {};
  const T* ctr = p.center + c0;
  const T* is = Backward ? p.invstd + c0 : nullptr;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t o = r * p.C + c0;
    const T* px = p.x + o;
    if constexpr (!Backward) {
#pragma omp simd
      for (std::int64_t c = 0; c < w; ++c) {
        const double d = static_cast<double>(px[c]) - static_cast<double>(ctr[c]);
        sa[c] += d;
        sb[c] += d * d;
      }
    } else {
      const T* pd = p.dy + o;
      const T* py = Relu ? p.relu_y + o : nullptr;
#pragma omp simd
      for (std::int64_t c = 0; c < w; ++c) {
        const double d = dz_of<Relu>(pd, py, c);
        sa[c] += d;
        sb[c] += d * ((static_cast<double>(px[c]) - ctr[c]) * is[c]);
      }
    }
  }
  for (std::int64_t c = 0; c < w; ++c) {
    a[c0 + c] += sa[c];
    b[c0 + c] += sb[c];
  }
}

template <class T>
CODISTILL_ALWAYS_INLINE void run_general(const Pass<T>& p, std::int64_t r0, std::int64_t r1, double* a, double* b) {
  const std::int64_t C = p.C;
  const bool relu = p.relu_y != nullptr;
  switch (p.kind) {
    case Pass<T>::forward_sums:
    case Pass<T>::backward_sums:
      for (std::int64_t c0 = 0; c0 < C; c0 += kBlock) {
        const std::int64_t w = std::min(kBlock, C - c0);
        if (p.kind == Pass<T>::forward_sums) sums_block<false, false>(p, r0, r1, c0, w, a, b);
        else if (relu) sums_block<true, true>(p, r0, r1, c0, w, a, b);
        else sums_block<true, false>(p, r0, r1, c0, w, a, b);
      }
      return;
    case Pass<T>::normalize:
      for (std::int64_t r = r0; r < r1; ++r) {
        const T* px = p.x + r * C;
        T* q = p.out + r * C;
#pragma omp simd
        for (std::int64_t c = 0; c < C; ++c) {
          const T v = px[c] * p.scale[c] + p.shift[c];
          q[c] = p.relu && !(v > T(0)) ? T(0) : v;  // relu_forward's rule (NaN -> 0)
        }
      }
      return;
    case Pass<T>::backward_dx:
    case Pass<T>::eval_dx: {
      // dx in double (in float it drifts past the op tests' bound where the terms nearly
      // cancel: dx ~ 1e-5 from O(1) inputs at two values per channel).
      const bool train = p.kind == Pass<T>::backward_dx;
      for (std::int64_t r = r0; r < r1; ++r) {
        const std::int64_t o = r * C;
        for (std::int64_t c = 0; c < C; ++c) {
          const T d = relu ? dz_of<true>(p.dy + o, p.relu_y + o, c) : p.dy[o + c];
          const double v = train ? d - p.mdz[c] - (static_cast<double>(p.x[o + c]) - p.mean[c]) * p.is[c] * p.mdzxh[c]
                                 : static_cast<double>(d);
          p.out[o + c] = static_cast<T>(p.g[c] * v);
        }
      }
      return;
    }
  }
}

// Float32 with whole vectors of channels: the loops of batchnorm_rows_vec.hpp.
template <int G>
CODISTILL_ALWAYS_INLINE void sums_vec(const Pass<float>& p, std::int64_t r0, std::int64_t r1, double* a, double* b) {
  namespace v = bn_rows_vec;
  const std::int64_t step = G * v::kLanes;
  for (std::int64_t c0 = 0; c0 < p.C; c0 += step) {
    if (p.kind == Pass<float>::forward_sums)
      v::sums<G, false, false>(p.x, nullptr, nullptr, p.center, nullptr, r0, r1, p.C, c0, a, b);
    else if (p.relu_y)
      v::sums<G, true, true>(p.x, p.relu_y, p.dy, p.center, p.invstd, r0, r1, p.C, c0, a, b);
    else
      v::sums<G, true, false>(p.x, nullptr, p.dy, p.center, p.invstd, r0, r1, p.C, c0, a, b);
  }
}

CODISTILL_ALWAYS_INLINE void run_vec(const Pass<float>& p, std::int64_t r0, std::int64_t r1, double* a, double* b) {
  namespace v = bn_rows_vec;
  const std::int64_t groups = p.C / v::kLanes;
  const bool relu = p.relu_y != nullptr;
  switch (p.kind) {
    case Pass<float>::forward_sums:
    case Pass<float>::backward_sums:
      // Up to 4 vectors of channels per sweep of the chunk: 4 independent accumulator
      // chains, and the chunk's rows (at most 64 KiB of one tensor) stay in cache between sweeps.
      if (groups % 4 == 0) return sums_vec<4>(p, r0, r1, a, b);
      if (groups % 2 == 0) return sums_vec<2>(p, r0, r1, a, b);
      return sums_vec<1>(p, r0, r1, a, b);
    case Pass<float>::normalize:
      if (p.relu) return v::normalize<true>(p.x, p.out, p.scale, p.shift, r0, r1, p.C);
      return v::normalize<false>(p.x, p.out, p.scale, p.shift, r0, r1, p.C);
    case Pass<float>::backward_dx:
      if (relu) return v::dx<true, true>(p.x, p.relu_y, p.dy, p.out, p.g, p.mdz, p.mdzxh, p.mean, p.is, r0, r1, p.C);
      return v::dx<false, true>(p.x, nullptr, p.dy, p.out, p.g, p.mdz, p.mdzxh, p.mean, p.is, r0, r1, p.C);
    case Pass<float>::eval_dx:
      if (relu) return v::dx<true, false>(p.x, p.relu_y, p.dy, p.out, p.g, p.mdz, p.mdzxh, p.mean, p.is, r0, r1, p.C);
      return v::dx<false, false>(p.x, nullptr, p.dy, p.out, p.g, p.mdz, p.mdzxh, p.mean, p.is, r0, r1, p.C);
  }
}

template <class T>
CODISTILL_ALWAYS_INLINE void run(const Pass<T>& p, std::int64_t r0, std::int64_t r1, double* a, double* b) {
  if constexpr (std::is_same_v<T, float>)
    if (p.C % bn_rows_vec::kLanes == 0) return run_vec(p, r0, r1, a, b);
  run_general(p, r0, r1, a, b);
}

// The one non-inlined function per ISA around the loops (kernels/cpu/isa.hpp).
template <class T>
CODISTILL_TARGET_AVX512 void run_avx512(const Pass<T>& p, std::int64_t r0, std::int64_t r1, double* a, double* b) {
  run(p, r0, r1, a, b);
}
template <class T>
CODISTILL_TARGET_AVX2 void run_avx2(const Pass<T>& p, std::int64_t r0, std::int64_t r1, double* a, double* b) {
  run(p, r0, r1, a, b);
}
template <class T>
void run_baseline(const Pass<T>& p, std::int64_t r0, std::int64_t r1, double* a, double* b) {
  run(p, r0, r1, a, b);
}

// Pass p over every row, chunk by chunk (threads over chunks). With partials (pa, pb: chunks
// x C doubles, zeroed), chunk k's sums go to row k of them.
template <class T>
void over_chunks(const BatchNormShape& s, const Pass<T>& p, double* pa = nullptr, double* pb = nullptr) {
  using Fn = void (*)(const Pass<T>&, std::int64_t, std::int64_t, double*, double*);
  Fn fn = run_baseline<T>;
  switch (chosen_isa()) {
    case Isa::avx512: fn = run_avx512<T>; break;
    case Isa::avx2: fn = run_avx2<T>; break;
    case Isa::baseline: break;
  }
  const std::int64_t R = s.batch, C = s.channels, chunks = (R + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (parallel(s))
  for (std::int64_t k = 0; k < chunks; ++k)
    fn(p, k * kChunk, std::min(R, (k + 1) * kChunk), pa ? pa + k * C : nullptr, pb ? pb + k * C : nullptr);
}

// The per-channel sums of pass p: chunk partials, added in chunk order.
template <class T>
void chunked_sums(const BatchNormShape& s, const Pass<T>& p, std::vector<double>& out_a, std::vector<double>& out_b) {
  const std::int64_t C = s.channels, chunks = (s.batch + kChunk - 1) / kChunk;
  std::vector<double> pa(static_cast<std::size_t>(chunks * C), 0.0), pb(pa.size(), 0.0);
  over_chunks(s, p, pa.data(), pb.data());
  out_a.assign(static_cast<std::size_t>(C), 0.0);
  out_b.assign(static_cast<std::size_t>(C), 0.0);
  for (std::int64_t k = 0; k < chunks; ++k)
    for (std::int64_t c = 0; c < C; ++c) {
      out_a[c] += pa[k * C + c];
      out_b[c] += pb[k * C + c];
    }
}

}  // namespace

template <class T>
void batchnorm_rows_forward(const T* x, const T* gamma, const T* beta, T* rm, T* rv, T* y, T* sm, T* si,
                            bool training, bool relu, const BatchNormShape& s) {
  const std::int64_t C = s.channels;
  const double M = static_cast<double>(s.per_channel());
  std::vector<double> mean(static_cast<std::size_t>(C)), var(static_cast<std::size_t>(C));
  if (training) {
    // Sums of x - K, K = row 0 (each channel's first value): the variance then does not come
    // from the difference of two large sums when |mean| >> std.
    Pass<T> p;
    p.kind = Pass<T>::forward_sums, p.C = C, p.x = x, p.center = x;
    std::vector<double> sum, sq;
    chunked_sums(s, p, sum, sq);
    for (std::int64_t c = 0; c < C; ++c) {
      const double shift = sum[c] / M;
      mean[c] = static_cast<double>(x[c]) + shift;
      var[c] = std::max(0.0, sq[c] / M - shift * shift);
      rm[c] = static_cast<T>((1 - s.momentum) * rm[c] + s.momentum * mean[c]);
      rv[c] = static_cast<T>((1 - s.momentum) * rv[c] + s.momentum * var[c] * M / (M - 1));
    }
  } else {
    for (std::int64_t c = 0; c < C; ++c) mean[c] = rm[c], var[c] = rv[c];
  }
  std::vector<T> scale(static_cast<std::size_t>(C)), shift(static_cast<std::size_t>(C));
  for (std::int64_t c = 0; c < C; ++c) {
    const double invstd = 1 / std::sqrt(var[c] + s.eps);
    sm[c] = static_cast<T>(mean[c]);
    si[c] = static_cast<T>(invstd);
    scale[c] = static_cast<T>(invstd * gamma[c]);
    shift[c] = static_cast<T>(beta[c] - mean[c] * invstd * gamma[c]);
  }
  Pass<T> p;
  p.kind = Pass<T>::normalize, p.C = C, p.x = x, p.out = y, p.scale = scale.data(), p.shift = shift.data();
  p.relu = relu;
  over_chunks(s, p);
}

template <class T>
void batchnorm_rows_backward(const T* x, const T* relu_y, const T* gamma, const T* sm, const T* si, const T* dy,
                             T* dx, T* dgamma, T* dbeta, bool training, const BatchNormShape& s) {
  const std::int64_t C = s.channels;
  const double M = static_cast<double>(s.per_channel());
  Pass<T> p;
  p.C = C, p.x = x, p.dy = dy, p.relu_y = relu_y;
  p.kind = Pass<T>::backward_sums, p.center = sm, p.invstd = si;
  std::vector<double> sum_dy, sum_dy_xh;
  chunked_sums(s, p, sum_dy, sum_dy_xh);
  for (std::int64_t c = 0; c < C; ++c) {
    dbeta[c] = static_cast<T>(dbeta[c] + sum_dy[c]);
    dgamma[c] = static_cast<T>(dgamma[c] + sum_dy_xh[c]);
  }
  if (!dx) return;
  // dx = g (dz - sum dz / M - xh sum dz*xh / M), g = gamma invstd, xh = (x - mean) invstd.
  std::vector<double> g(static_cast<std::size_t>(C)), mdz(g.size()), mdzxh(g.size()), mean(sm, sm + C),
      invstd(si, si + C);
  for (std::int64_t c = 0; c < C; ++c) {
    g[c] = gamma[c] * invstd[c];
    mdz[c] = sum_dy[c] / M;
    mdzxh[c] = sum_dy_xh[c] / M;
  }
  p.kind = training ? Pass<T>::backward_dx : Pass<T>::eval_dx;
  p.out = dx, p.g = g.data(), p.mdz = mdz.data(), p.mdzxh = mdzxh.data(), p.mean = mean.data();
  p.is = invstd.data();
  over_chunks(s, p);
}

#define CODISTILL_BATCHNORM_ROWS(T)                                                                                  \
  template void batchnorm_rows_forward<T>(const T*, const T*, const T*, T*, T*, T*, T*, T*, bool, bool,              \
                                          const BatchNormShape&);                                                    \
  template void batchnorm_rows_backward<T>(const T*, const T*, const T*, const T*, const T*, const T*, T*, T*, T*,   \
                                           bool, const BatchNormShape&);
CODISTILL_BATCHNORM_ROWS(float)
CODISTILL_BATCHNORM_ROWS(double)
#undef CODISTILL_BATCHNORM_ROWS

}  // namespace codistill::kernels::cpu
