#include "kernels/cpu/batchnorm_rows.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/batchnorm_layout.hpp"

namespace codistill::kernels::cpu {
namespace {

// Rows per chunk of the statistics passes: fixed, so the sums' order is too.
constexpr std::int64_t kChunk = 256;
bool parallel(const BatchNormShape& s) {
  return s.batch * s.channels >= batchnorm_layout::kParallelMin && !omp_in_parallel();
}

// Per-channel sums over the rows of f(row, c, a, b) accumulating into a[c], b[c]: chunk
// partials, then added in chunk order into out_a, out_b.
template <class Body>
void chunked_sums(const BatchNormShape& s, Body body, std::vector<double>& out_a, std::vector<double>& out_b) {
  const std::int64_t R = s.batch, C = s.channels, chunks = (R + kChunk - 1) / kChunk;
  std::vector<double> pa(static_cast<std::size_t>(chunks * C), 0.0), pb(pa.size(), 0.0);
#pragma omp parallel for schedule(static) if (parallel(s))
  for (std::int64_t k = 0; k < chunks; ++k) {
    double* a = pa.data() + k * C;
    double* b = pb.data() + k * C;
    const std::int64_t end = std::min(R, (k + 1) * kChunk);
    for (std::int64_t r = k * kChunk; r < end; ++r) body(r, a, b);
  }
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
                            bool training, const BatchNormShape& s) {
  const std::int64_t R = s.batch, C = s.channels;
  const double M = static_cast<double>(s.per_channel());
  std::vector<double> mean(static_cast<std::size_t>(C)), var(static_cast<std::size_t>(C));
  if (training) {
    const T* K = x;  // row 0: the shift of each channel's sums
    std::vector<double> sum, sq;
    chunked_sums(
        s,
        [&](std::int64_t r, double* a, double* b) {
          const T* p = x + r * C;
#pragma omp simd
          for (std::int64_t c = 0; c < C; ++c) {
            const double d = static_cast<double>(p[c]) - static_cast<double>(K[c]);
            a[c] += d;
            b[c] += d * d;
          }
        },
        sum, sq);
    for (std::int64_t c = 0; c < C; ++c) {
      const double shift = sum[c] / M;
      mean[c] = static_cast<double>(K[c]) + shift;
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
  const T* sc = scale.data();
  const T* sh = shift.data();
#pragma omp parallel for schedule(static) if (parallel(s))
  for (std::int64_t r = 0; r < R; ++r) {
    const T* p = x + r * C;
    T* q = y + r * C;
#pragma omp simd
    for (std::int64_t c = 0; c < C; ++c) q[c] = p[c] * sc[c] + sh[c];
  }
}

template <class T>
void batchnorm_rows_backward(const T* x, const T* gamma, const T* sm, const T* si, const T* dy, T* dx, T* dgamma,
                             T* dbeta, bool training, const BatchNormShape& s) {
  const std::int64_t R = s.batch, C = s.channels;
  const double M = static_cast<double>(s.per_channel());
  std::vector<double> mean(sm, sm + C), invstd(si, si + C);
  const double* mu = mean.data();
  const double* is = invstd.data();
  std::vector<double> sum_dy, sum_dy_xh;
  chunked_sums(
      s,
      [&](std::int64_t r, double* a, double* b) {
        const T* px = x + r * C;
        const T* pd = dy + r * C;
#pragma omp simd
        for (std::int64_t c = 0; c < C; ++c) {
          a[c] += pd[c];
          b[c] += pd[c] * ((px[c] - mu[c]) * is[c]);
        }
      },
      sum_dy, sum_dy_xh);
  for (std::int64_t c = 0; c < C; ++c) {
    dbeta[c] = static_cast<T>(dbeta[c] + sum_dy[c]);
    dgamma[c] = static_cast<T>(dgamma[c] + sum_dy_xh[c]);
  }
  if (!dx) return;
  // As the per-channel path: dx in double (in float it drifts past the op tests' bound where
  // the terms nearly cancel).
  std::vector<double> g(static_cast<std::size_t>(C)), mdy(g.size()), mdyxh(g.size());
  for (std::int64_t c = 0; c < C; ++c) {
    g[c] = gamma[c] * invstd[c];
    mdy[c] = sum_dy[c] / M;
    mdyxh[c] = sum_dy_xh[c] / M;
  }
  const double* pg = g.data();
  const double* pm = mdy.data();
  const double* pq = mdyxh.data();
#pragma omp parallel for schedule(static) if (parallel(s))
  for (std::int64_t r = 0; r < R; ++r) {
    const T* px = x + r * C;
    const T* pd = dy + r * C;
    T* q = dx + r * C;
    if (training) {
#pragma omp simd
      for (std::int64_t c = 0; c < C; ++c)
        q[c] = static_cast<T>(pg[c] * (pd[c] - pm[c] - (px[c] - mu[c]) * is[c] * pq[c]));
    } else {
#pragma omp simd
      for (std::int64_t c = 0; c < C; ++c) q[c] = static_cast<T>(pg[c] * pd[c]);
    }
  }
}

#define CODISTILL_BATCHNORM_ROWS(T)                                                                                  \
  template void batchnorm_rows_forward<T>(const T*, const T*, const T*, T*, T*, T*, T*, T*, bool,                    \
                                          const BatchNormShape&);                                                    \
  template void batchnorm_rows_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, bool,       \
                                           const BatchNormShape&);
CODISTILL_BATCHNORM_ROWS(float)
CODISTILL_BATCHNORM_ROWS(double)
#undef CODISTILL_BATCHNORM_ROWS

}  // namespace codistill::kernels::cpu
