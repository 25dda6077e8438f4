#include "kernels/cpu/image/batchnorm_sync.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cpu/backend_impl.hpp"
#include "kernels/cpu/backend_util.hpp"
#include "kernels/cpu/image/batchnorm_layout.hpp"

namespace codistill::kernels::cpu {
namespace {

using batchnorm_layout::Layout;
using batchnorm_layout::parallel_channels;

// The count of the summed sums: a whole number of values, at least 2 (the unbiased running
// variance divides by M - 1).
double summed_count(const double* sums, const BatchNormShape& s) {
  const double M = sums[2 * s.channels];
  if (!(M >= 2) || M != std::floor(M))
    throw std::invalid_argument("synchronized batchnorm: the summed value count is " + std::to_string(M) +
                                " (a whole number >= 2 expected: did every rank add its sums?)");
  return M;
}

}  // namespace

template <class T>
void batchnorm_sums(const T* x, const T* dy, const T* center, const T* invstd, double* sums, const BatchNormShape& s,
                    Impl impl) {
  s.validate(false);  // one rank may hold a single value per channel: the summed count must be >= 2
  const Layout L = batchnorm_layout::layout_of(s);
#pragma omp parallel for schedule(static) if (parallel_channels(s, impl))
  for (std::int64_t c = 0; c < L.C; ++c) {
    const double k = center[c], is = invstd ? static_cast<double>(invstd[c]) : 1.0;
    double a = 0, b = 0;
    for (std::int64_t n = 0; n < L.N; ++n) {
      const T* px = x + L.at(n, c);
      double pa = 0, pb = 0;
      if (dy) {
        const T* pd = dy + L.at(n, c);
#pragma omp simd reduction(+ : pa, pb)
        for (std::int64_t i = 0; i < L.S; ++i) {
          pa += pd[i];
          pb += pd[i] * ((px[i] - k) * is);
        }
      } else {
#pragma omp simd reduction(+ : pa, pb)
        for (std::int64_t i = 0; i < L.S; ++i) {
          const double d = px[i] - k;
          pa += d;
          pb += d * d;
        }
      }
      a += pa;
      b += pb;
    }
    sums[c] = a;
    sums[L.C + c] = b;
  }
  sums[2 * L.C] = static_cast<double>(s.per_channel());
}

template <class T>
void batchnorm_forward_synced(const T* x, const T* gamma, const T* beta, T* running_mean, T* running_var,
                              const double* sums, T* y, T* save_mean, T* save_invstd, const BatchNormShape& s,
                              Impl impl) {
  s.validate(false);  // one rank may hold a single value per channel: the summed count must be >= 2
  const Layout L = batchnorm_layout::layout_of(s);
  const double M = summed_count(sums, s);
#pragma omp parallel for schedule(static) if (parallel_channels(s, impl))
  for (std::int64_t c = 0; c < L.C; ++c) {
    const double d = sums[c] / M;
    const double mean = running_mean[c] + d;  // the center of the sums: the running mean before this update
    const double var = std::max(sums[L.C + c] / M - d * d, 0.0);
    running_mean[c] = static_cast<T>((1 - s.momentum) * running_mean[c] + s.momentum * mean);
    running_var[c] = static_cast<T>((1 - s.momentum) * running_var[c] + s.momentum * var * M / (M - 1));
    const double invstd = 1 / std::sqrt(var + s.eps);
    save_mean[c] = static_cast<T>(mean);
    save_invstd[c] = static_cast<T>(invstd);
    for (std::int64_t n = 0; n < L.N; ++n) {
      const T* p = x + L.at(n, c);
      T* q = y + L.at(n, c);
#pragma omp simd
      for (std::int64_t i = 0; i < L.S; ++i) q[i] = static_cast<T>((p[i] - mean) * invstd * gamma[c] + beta[c]);
    }
  }
}

template <class T>
void batchnorm_backward_synced(const T* x, const T* gamma, const T* save_mean, const T* save_invstd, const T* dy,
                               const double* local_sums, const double* sums, T* dx, T* dgamma, T* dbeta,
                               const BatchNormShape& s, Impl impl) {
  s.validate(false);  // one rank may hold a single value per channel: the summed count must be >= 2
  const Layout L = batchnorm_layout::layout_of(s);
  const double M = summed_count(sums, s);
#pragma omp parallel for schedule(static) if (parallel_channels(s, impl))
  for (std::int64_t c = 0; c < L.C; ++c) {
    dbeta[c] = static_cast<T>(dbeta[c] + local_sums[c]);
    dgamma[c] = static_cast<T>(dgamma[c] + local_sums[L.C + c]);
    if (!dx) continue;
    const double mean = save_mean[c], invstd = save_invstd[c], g = gamma[c] * invstd;
    const double mean_dy = sums[c] / M, mean_dy_xh = sums[L.C + c] / M;
    for (std::int64_t n = 0; n < L.N; ++n) {
      const T* px = x + L.at(n, c);
      const T* pd = dy + L.at(n, c);
      T* q = dx + L.at(n, c);
#pragma omp simd
      for (std::int64_t i = 0; i < L.S; ++i)
        q[i] = static_cast<T>(g * (pd[i] - mean_dy - (px[i] - mean) * invstd * mean_dy_xh));
    }
  }
}

#define CODISTILL_BATCHNORM_SYNC(T)                                                                                \
  template void batchnorm_sums<T>(const T*, const T*, const T*, const T*, double*, const BatchNormShape&, Impl);  \
  template void batchnorm_forward_synced<T>(const T*, const T*, const T*, T*, T*, const double*, T*, T*, T*,      \
                                            const BatchNormShape&, Impl);                                         \
  template void batchnorm_backward_synced<T>(const T*, const T*, const T*, const T*, const T*, const double*,     \
                                             const double*, T*, T*, T*, const BatchNormShape&, Impl);
CODISTILL_BATCHNORM_SYNC(float)
CODISTILL_BATCHNORM_SYNC(double)
#undef CODISTILL_BATCHNORM_SYNC

// ---- the backend's entry points (kernels/op_list.def) --------------------------------------

using namespace backend_detail;

void CpuBackend::batchnorm_sums(const Tensor& x, const Tensor* dy, const Tensor& center, const Tensor* invstd,
                                Tensor& sums, const BatchNormShape& s, Queue& q) {
  run_op(*this, Op::batchnorm_sync, x.dtype(), "synchronized batchnorm sums", [&]<class T>() {
    check_sums(sums, s, "sums");
    cpu::batchnorm_sums<T>(x.data<T>(), opt<T>(dy), center.data<T>(),
                           opt<T>(invstd), sums.data<double>(), s, impl_of(q));
  });
}

void CpuBackend::batchnorm_forward_synced(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                          Tensor& running_mean, Tensor& running_var, const Tensor& sums, Tensor& y,
                                          Tensor& save_mean, Tensor& save_invstd, const BatchNormShape& s, Queue& q) {
  run_op(*this, Op::batchnorm_sync, x.dtype(), "synchronized batchnorm", [&]<class T>() {
    check_sums(sums, s, "sums");
    cpu::batchnorm_forward_synced<T>(x.data<T>(), gamma.data<T>(), beta.data<T>(), running_mean.data<T>(),
                                     running_var.data<T>(), sums.data<double>(), y.data<T>(), save_mean.data<T>(),
                                     save_invstd.data<T>(), s, impl_of(q));
  });
}

void CpuBackend::batchnorm_backward_synced(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                           const Tensor& save_invstd, const Tensor& dy, const Tensor& local_sums,
                                           const Tensor& sums, Tensor* dx, Tensor& dgamma, Tensor& dbeta,
                                           const BatchNormShape& s, Queue& q) {
  run_op(*this, Op::batchnorm_sync, x.dtype(), "synchronized batchnorm backward", [&]<class T>() {
    check_sums(local_sums, s, "local sums");
    check_sums(sums, s, "sums");
    cpu::batchnorm_backward_synced<T>(x.data<T>(), gamma.data<T>(), save_mean.data<T>(), save_invstd.data<T>(),
                                      dy.data<T>(), local_sums.data<double>(), sums.data<double>(), opt<T>(dx),
                                      dgamma.data<T>(), dbeta.data<T>(), s, impl_of(q));
  });
}

}  // namespace codistill::kernels::cpu
