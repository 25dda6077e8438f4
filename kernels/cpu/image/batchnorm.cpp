#include "kernels/cpu/image/batchnorm.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cpu/backend_impl.hpp"
#include "kernels/cpu/backend_util.hpp"
#include "kernels/cpu/image/batchnorm_layout.hpp"
#include "kernels/cpu/image/batchnorm_rows.hpp"

namespace codistill::kernels::cpu {
namespace {

using batchnorm_layout::Layout;

// One channel, reference: plain loops in the order a reader would write them.
template <class T>
void forward_channel_ref(const T* x, const T* gamma, const T* beta, T* rm, T* rv, T* y, T* sm, T* si,
                         bool training, bool relu, const BatchNormShape& s, const Layout& L, std::int64_t c) {
  const double M = static_cast<double>(s.per_channel());
  double mean, var;
  if (training) {
    double sum = 0;
    for (std::int64_t n = 0; n < L.N; ++n)
      for (std::int64_t i = 0; i < L.S; ++i) sum += x[L.at(n, c) + i];
    mean = sum / M;
    double sq = 0;
    for (std::int64_t n = 0; n < L.N; ++n)
      for (std::int64_t i = 0; i < L.S; ++i) {
        const double d = x[L.at(n, c) + i] - mean;
        sq += d * d;
      }
    var = sq / M;
    rm[c] = static_cast<T>((1 - s.momentum) * rm[c] + s.momentum * mean);
    rv[c] = static_cast<T>((1 - s.momentum) * rv[c] + s.momentum * var * M / (M - 1));
  } else {
    mean = rm[c];
    var = rv[c];
  }
  const double invstd = 1 / std::sqrt(var + s.eps);
  sm[c] = static_cast<T>(mean);
  si[c] = static_cast<T>(invstd);
  for (std::int64_t n = 0; n < L.N; ++n)
    for (std::int64_t i = 0; i < L.S; ++i) {
      const std::int64_t k = L.at(n, c) + i;
      const T v = static_cast<T>((x[k] - mean) * invstd * gamma[c] + beta[c]);
      y[k] = relu && !(v > T(0)) ? T(0) : v;
    }
}

// One channel, fast: one statistics pass instead of two. Sums of x - K and (x - K)^2 in
// double, shifted by K = the channel's first value (so the variance does not come from the
// difference of two large sums when |mean| >> std), then var = E[(x-K)^2] - E[x-K]^2; the
// normalization folds into one multiply-add per element (scale, shift in T). Statistics
// still in double, as the reference's; they agree within rounding.
template <class T>
void forward_channel_fast(const T* x, const T* gamma, const T* beta, T* rm, T* rv, T* y, T* sm, T* si,
                          bool training, bool relu, const BatchNormShape& s, const Layout& L, std::int64_t c) {
  const double M = static_cast<double>(s.per_channel());
  double mean, var;
  if (training) {
    const double K = x[L.at(0, c)];
    double sum = 0, sq = 0;
    for (std::int64_t n = 0; n < L.N; ++n) {
      const T* p = x + L.at(n, c);
      double a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
      for (std::int64_t i = 0; i < L.S; ++i) {
        const double d = static_cast<double>(p[i]) - K;
        a += d;
        b += d * d;
      }
      sum += a;
      sq += b;
    }
    const double shift = sum / M;
    mean = K + shift;
    var = std::max(0.0, sq / M - shift * shift);
    rm[c] = static_cast<T>((1 - s.momentum) * rm[c] + s.momentum * mean);
    rv[c] = static_cast<T>((1 - s.momentum) * rv[c] + s.momentum * var * M / (M - 1));
  } else {
    mean = rm[c];
    var = rv[c];
  }
  const double invstd = 1 / std::sqrt(var + s.eps);
  sm[c] = static_cast<T>(mean);
  si[c] = static_cast<T>(invstd);
  const T scale = static_cast<T>(invstd * gamma[c]);
  const T shift = static_cast<T>(beta[c] - mean * invstd * gamma[c]);
  for (std::int64_t n = 0; n < L.N; ++n) {
    const T* p = x + L.at(n, c);
    T* q = y + L.at(n, c);
    if (relu) {
#pragma omp simd
      for (std::int64_t i = 0; i < L.S; ++i) {
        const T v = p[i] * scale + shift;
        q[i] = v > T(0) ? v : T(0);  // relu_forward's rule (NaN -> 0)
      }
    } else {
#pragma omp simd
      for (std::int64_t i = 0; i < L.S; ++i) q[i] = p[i] * scale + shift;
    }
  }
}

// dz: dy, or with a fused relu dy where y > 0 and 0 elsewhere (dy loaded unconditionally:
// a conditional load would not vectorize).
template <bool Relu, class T>
inline T masked(const T* dy, const T* y, std::int64_t i) {
  const T d = dy[i];
  if constexpr (Relu) return y[i] > T(0) ? d : T(0);
  return d;
}

template <bool Relu, class T>
void backward_channel(const T* x, const T* y, const T* gamma, const T* sm, const T* si, const T* dy, T* dx,
                      T* dgamma, T* dbeta, bool training, const BatchNormShape& s, const Layout& L, std::int64_t c) {
  const double mean = sm[c], invstd = si[c], M = static_cast<double>(s.per_channel());
  double sum_dy = 0, sum_dy_xh = 0;
  for (std::int64_t n = 0; n < L.N; ++n) {
    const T* px = x + L.at(n, c);
    const T* pd = dy + L.at(n, c);
    const T* py = Relu ? y + L.at(n, c) : nullptr;
    double a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
    for (std::int64_t i = 0; i < L.S; ++i) {
      const T d = masked<Relu>(pd, py, i);
      a += d;
      b += d * ((px[i] - mean) * invstd);
    }
    sum_dy += a;
    sum_dy_xh += b;
  }
  dbeta[c] = static_cast<T>(dbeta[c] + sum_dy);
  dgamma[c] = static_cast<T>(dgamma[c] + sum_dy_xh);
  if (!dx) return;
  const double g = gamma[c] * invstd;
  // dx stays in double in the fast path too: in float it drifts past the op tests' bound
  // where the terms nearly cancel (dx ~ 1e-5 from O(1) inputs; measured).
  for (std::int64_t n = 0; n < L.N; ++n) {
    const T* px = x + L.at(n, c);
    const T* pd = dy + L.at(n, c);
    const T* py = Relu ? y + L.at(n, c) : nullptr;
    T* q = dx + L.at(n, c);
    if (training) {
      const double mean_dy = sum_dy / M, mean_dy_xh = sum_dy_xh / M;
#pragma omp simd
      for (std::int64_t i = 0; i < L.S; ++i)
        q[i] = static_cast<T>(g * (masked<Relu>(pd, py, i) - mean_dy - (px[i] - mean) * invstd * mean_dy_xh));
    } else {
#pragma omp simd
      for (std::int64_t i = 0; i < L.S; ++i) q[i] = static_cast<T>(g * masked<Relu>(pd, py, i));
    }
  }
}

}  // namespace

template <class T>
void batchnorm_forward(const T* x, const T* gamma, const T* beta, T* running_mean, T* running_var, T* y,
                       T* save_mean, T* save_invstd, bool training, const BatchNormShape& s, Impl impl,
                       Activation act) {
  s.validate(training);
  if (act != Activation::none && act != Activation::relu)
    throw std::invalid_argument(std::string("batchnorm: the fused activation must be relu, got ") +
                                activation_name(act));
  const bool relu = act == Activation::relu;
  if (impl == Impl::fast && s.spatial == 1)  // [rows, channels]: streamed by rows
    return batchnorm_rows_forward(x, gamma, beta, running_mean, running_var, y, save_mean, save_invstd, training,
                                  relu, s);
  const Layout L = batchnorm_layout::layout_of(s);
  if (impl == Impl::reference) {
    for (std::int64_t c = 0; c < L.C; ++c)
      forward_channel_ref(x, gamma, beta, running_mean, running_var, y, save_mean, save_invstd, training, relu, s, L,
                          c);
    return;
  }
  const bool par = batchnorm_layout::parallel_channels(s, impl);
#pragma omp parallel for schedule(static) if (par)
  for (std::int64_t c = 0; c < L.C; ++c)
    forward_channel_fast(x, gamma, beta, running_mean, running_var, y, save_mean, save_invstd, training, relu, s, L,
                         c);
}

template <class T>
void batchnorm_backward(const T* x, const T* gamma, const T* save_mean, const T* save_invstd, const T* dy, T* dx,
                        T* dgamma, T* dbeta, bool training, const BatchNormShape& s, Impl impl, const T* relu_y) {
  s.validate(training);
  if (impl == Impl::fast && s.spatial == 1)  // [rows, channels]: streamed by rows
    return batchnorm_rows_backward(x, relu_y, gamma, save_mean, save_invstd, dy, dx, dgamma, dbeta, training, s);
  const Layout L = batchnorm_layout::layout_of(s);
  // The reference and the fast path share the per-channel arithmetic (it is already the
  // plain formula); the fast path adds threads over channels.
  const bool par = batchnorm_layout::parallel_channels(s, impl);
#pragma omp parallel for schedule(static) if (par)
  for (std::int64_t c = 0; c < L.C; ++c) {
    if (relu_y)
      backward_channel<true>(x, relu_y, gamma, save_mean, save_invstd, dy, dx, dgamma, dbeta, training, s, L, c);
    else
      backward_channel<false>(x, relu_y, gamma, save_mean, save_invstd, dy, dx, dgamma, dbeta, training, s, L, c);
  }
}

#define CODISTILL_BATCHNORM(T)                                                                                    \
  template void batchnorm_forward<T>(const T*, const T*, const T*, T*, T*, T*, T*, T*, bool, const BatchNormShape&, \
                                     Impl, Activation);                                                           \
  template void batchnorm_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, bool,          \
                                      const BatchNormShape&, Impl, const T*);
CODISTILL_BATCHNORM(float)
CODISTILL_BATCHNORM(double)
#undef CODISTILL_BATCHNORM

// ---- the backend's entry points (kernels/op_list.def) --------------------------------------

using namespace backend_detail;

void CpuBackend::batchnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                                   Tensor& running_var, Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                                   bool training, const BatchNormShape& s, Queue& q) {
  run_op(*this, Op::batchnorm, x.dtype(), "batchnorm", [&]<class T>() {
    cpu::batchnorm_forward<T>(x.data<T>(), gamma.data<T>(), beta.data<T>(), running_mean.data<T>(),
                              running_var.data<T>(), y.data<T>(), save_mean.data<T>(), save_invstd.data<T>(),
                              training, s, impl_of(q));
  });
}

void CpuBackend::batchnorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                    const Tensor& save_invstd, const Tensor& dy, Tensor* dx, Tensor& dgamma,
                                    Tensor& dbeta, bool training, const BatchNormShape& s, Queue& q) {
  run_op(*this, Op::batchnorm, x.dtype(), "batchnorm backward", [&]<class T>() {
    cpu::batchnorm_backward<T>(x.data<T>(), gamma.data<T>(), save_mean.data<T>(), save_invstd.data<T>(),
                               dy.data<T>(), opt<T>(dx), dgamma.data<T>(), dbeta.data<T>(), training, s,
                               impl_of(q));
  });
}

void CpuBackend::batchnorm_activation_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                              Tensor& running_mean, Tensor& running_var, Tensor& y, Tensor& save_mean,
                                              Tensor& save_invstd, bool training, Activation act,
                                              const BatchNormShape& s, Queue& q) {
  run_op(*this, Op::batchnorm_activation, x.dtype(), "batchnorm+activation", [&]<class T>() {
    check_fused_relu(act, "batchnorm+activation");
    cpu::batchnorm_forward<T>(x.data<T>(), gamma.data<T>(), beta.data<T>(), running_mean.data<T>(),
                              running_var.data<T>(), y.data<T>(), save_mean.data<T>(), save_invstd.data<T>(),
                              training, s, impl_of(q), act);
  });
}

void CpuBackend::batchnorm_activation_backward(const Tensor& x, const Tensor& y, const Tensor& gamma,
                                               const Tensor& save_mean, const Tensor& save_invstd, const Tensor& dy,
                                               Tensor* dx, Tensor& dgamma, Tensor& dbeta, bool training, Activation act,
                                               const BatchNormShape& s, Queue& q) {
  run_op(*this, Op::batchnorm_activation, x.dtype(), "batchnorm+activation backward", [&]<class T>() {
    check_fused_relu(act, "batchnorm+activation");
    cpu::batchnorm_backward<T>(x.data<T>(), gamma.data<T>(), save_mean.data<T>(), save_invstd.data<T>(),
                               dy.data<T>(), opt<T>(dx), dgamma.data<T>(), dbeta.data<T>(), training, s,
                               impl_of(q), y.data<T>());
  });
}

}  // namespace codistill::kernels::cpu
