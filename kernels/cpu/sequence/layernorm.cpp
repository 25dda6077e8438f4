#include "kernels/cpu/sequence/layernorm.hpp"

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/backend_impl.hpp"
#include "kernels/cpu/backend_util.hpp"

namespace codistill::kernels::cpu {
namespace {

constexpr std::int64_t kParallelMin = 1 << 14;

template <class T>
void forward_row(const T* x, const T* gamma, const T* beta, T* y, T* sm, T* si, std::int64_t F, double eps) {
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t f = 0; f < F; ++f) sum += x[f];
  const double mean = sum / static_cast<double>(F);
  double sq = 0;
#pragma omp simd reduction(+ : sq)
  for (std::int64_t f = 0; f < F; ++f) {
    const double d = x[f] - mean;
    sq += d * d;
  }
  const double invstd = 1 / std::sqrt(sq / static_cast<double>(F) + eps);
  *sm = static_cast<T>(mean);
  *si = static_cast<T>(invstd);
#pragma omp simd
  for (std::int64_t f = 0; f < F; ++f) y[f] = static_cast<T>((x[f] - mean) * invstd * gamma[f] + beta[f]);
}

// dx of one row; adds the row's dgamma/dbeta terms to dg/db.
template <class T>
void backward_row(const T* x, const T* gamma, double mean, double invstd, const T* dy, T* dx, double* dg, double* db,
                  std::int64_t F) {
  double sum_g = 0, sum_gxh = 0;
  for (std::int64_t f = 0; f < F; ++f) {
    const double xh = (x[f] - mean) * invstd, g = static_cast<double>(gamma[f]) * dy[f];
    sum_g += g;
    sum_gxh += g * xh;
    dg[f] += dy[f] * xh;
    db[f] += dy[f];
  }
  if (!dx) return;
  const double mg = sum_g / static_cast<double>(F), mgxh = sum_gxh / static_cast<double>(F);
#pragma omp simd
  for (std::int64_t f = 0; f < F; ++f) {
    const double xh = (x[f] - mean) * invstd;
    dx[f] = static_cast<T>(invstd * (static_cast<double>(gamma[f]) * dy[f] - mg - xh * mgxh));
  }
}

}  // namespace

template <class T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, T* y, T* save_mean, T* save_invstd,
                       const LayerNormShape& s, Impl impl) {
  s.validate();
  const std::int64_t R = s.rows, F = s.features;
  const bool par = impl == Impl::fast && R * F >= kParallelMin && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
  for (std::int64_t r = 0; r < R; ++r)
    forward_row(x + r * F, gamma, beta, y + r * F, save_mean + r, save_invstd + r, F, s.eps);
}

template <class T>
void layernorm_backward(const T* x, const T* gamma, const T* save_mean, const T* save_invstd, const T* dy, T* dx,
                        T* dgamma, T* dbeta, const LayerNormShape& s, Impl impl) {
  s.validate();
  const std::int64_t R = s.rows, F = s.features;
  const bool par = impl == Impl::fast && R * F >= kParallelMin && !omp_in_parallel();
  const int threads = par ? omp_get_max_threads() : 1;
  // Per-thread partial column sums, added in thread order afterwards.
  std::vector<double> dg(static_cast<std::size_t>(threads * F), 0.0), db(dg.size(), 0.0);
#pragma omp parallel num_threads(threads) if (par)
  {
    const int t = omp_get_thread_num();
    double* my_dg = dg.data() + t * F;
    double* my_db = db.data() + t * F;
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < R; ++r)
      backward_row(x + r * F, gamma, static_cast<double>(save_mean[r]), static_cast<double>(save_invstd[r]),
                   dy + r * F, dx ? dx + r * F : nullptr, my_dg, my_db, F);
  }
  for (std::int64_t f = 0; f < F; ++f) {
    double g = 0, b = 0;
    for (int t = 0; t < threads; ++t) {
      g += dg[static_cast<std::size_t>(t * F + f)];
      b += db[static_cast<std::size_t>(t * F + f)];
    }
    dgamma[f] = static_cast<T>(dgamma[f] + g);
    dbeta[f] = static_cast<T>(dbeta[f] + b);
  }
}

#define CODISTILL_LAYERNORM(T)                                                                                    \
  template void layernorm_forward<T>(const T*, const T*, const T*, T*, T*, T*, const LayerNormShape&, Impl);     \
  template void layernorm_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*,              \
                                      const LayerNormShape&, Impl);
CODISTILL_LAYERNORM(float)
CODISTILL_LAYERNORM(double)
#undef CODISTILL_LAYERNORM

// ---- the backend's entry points (kernels/op_list.def) --------------------------------------

using namespace backend_detail;

void CpuBackend::layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                                   Tensor& save_mean, Tensor& save_invstd, const LayerNormShape& s, Queue& q) {
  run_op(*this, Op::layernorm, x.dtype(), "layernorm", [&]<class T>() {
    cpu::layernorm_forward<T>(x.data<T>(), gamma.data<T>(), beta.data<T>(), y.data<T>(), save_mean.data<T>(),
                              save_invstd.data<T>(), s, impl_of(q));
  });
}

void CpuBackend::layernorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                    const Tensor& save_invstd, const Tensor& dy, Tensor* dx, Tensor& dgamma,
                                    Tensor& dbeta, const LayerNormShape& s, Queue& q) {
  run_op(*this, Op::layernorm, x.dtype(), "layernorm backward", [&]<class T>() {
    cpu::layernorm_backward<T>(x.data<T>(), gamma.data<T>(), save_mean.data<T>(), save_invstd.data<T>(),
                               dy.data<T>(), opt<T>(dx), dgamma.data<T>(), dbeta.data<T>(), s, impl_of(q));
  });
}

}  // namespace codistill::kernels::cpu
