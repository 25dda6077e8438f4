#include "kernels/cpu/sequence/softmax.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/cpu/backend_impl.hpp"
#include "kernels/cpu/backend_util.hpp"

namespace codistill::kernels::cpu {
namespace {

// Rows are independent; fork only when there is enough work to share (exp is ~20 cycles).
constexpr std::int64_t kParallelMin = 1 << 12;

void check(const char* op, std::int64_t M, std::int64_t N) {
  if (M < 0 || N < 1)
    throw std::invalid_argument(std::string(op) + ": bad sizes rows=" + std::to_string(M) +
                                " cols=" + std::to_string(N) + " (need rows >= 0, cols >= 1)");
}

bool go_parallel(std::int64_t work) { return work >= kParallelMin && !omp_in_parallel(); }

// One row, in place safe (y may alias x). The max and the sum are SIMD reductions over
// the row; their order depends only on N, never on the thread count.
template <class T>
void softmax_row(const T* x, T* y, std::int64_t N) {
  T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
  for (std::int64_t j = 0; j < N; ++j) mx = std::max(mx, x[j]);
  T sum = 0;
  for (std::int64_t j = 0; j < N; ++j) {
    const T e = std::exp(x[j] - mx);
    y[j] = e;
    sum += e;
  }
  const T inv = T(1) / sum;
#pragma omp simd
  for (std::int64_t j = 0; j < N; ++j) y[j] *= inv;
}

}  // namespace

template <class T>
void softmax_forward(const T* x, T* y, std::int64_t M, std::int64_t N, Impl impl) {
  check("softmax_forward", M, N);
  if (impl == Impl::reference) {
    for (std::int64_t m = 0; m < M; ++m) {
      const T* xr = x + m * N;
      T* yr = y + m * N;
      double mx = xr[0];
      for (std::int64_t j = 1; j < N; ++j) mx = std::max(mx, static_cast<double>(xr[j]));
      double sum = 0;
      for (std::int64_t j = 0; j < N; ++j) sum += std::exp(static_cast<double>(xr[j]) - mx);
      for (std::int64_t j = 0; j < N; ++j)
        yr[j] = static_cast<T>(std::exp(static_cast<double>(xr[j]) - mx) / sum);
    }
    return;
  }
  const bool par = go_parallel(M * N);
#pragma omp parallel for schedule(static) if (parallel : par)
  for (std::int64_t m = 0; m < M; ++m) softmax_row(x + m * N, y + m * N, N);
}

template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, std::int64_t M, std::int64_t N,
                      Impl impl) {
  check("softmax_backward", M, N);
  if (impl == Impl::reference) {
    for (std::int64_t m = 0; m < M; ++m) {
      double dot = 0;
      for (std::int64_t j = 0; j < N; ++j)
        dot += static_cast<double>(dy[m * N + j]) * static_cast<double>(y[m * N + j]);
      for (std::int64_t j = 0; j < N; ++j)
        dx[m * N + j] = static_cast<T>(static_cast<double>(y[m * N + j]) *
                                       (static_cast<double>(dy[m * N + j]) - dot));
    }
    return;
  }
  // dx may alias dy: the dot product is complete before the row is overwritten.
  const bool par = go_parallel(M * N);
#pragma omp parallel for schedule(static) if (parallel : par)
  for (std::int64_t m = 0; m < M; ++m) {
    const T* yr = y + m * N;
    const T* dyr = dy + m * N;
    T* dxr = dx + m * N;
    T dot = 0;
#pragma omp simd reduction(+ : dot)
    for (std::int64_t j = 0; j < N; ++j) dot += dyr[j] * yr[j];
#pragma omp simd
    for (std::int64_t j = 0; j < N; ++j) dxr[j] = yr[j] * (dyr[j] - dot);
  }
}

#define CODISTILL_SOFTMAX(T)                                                               \
  template void softmax_forward<T>(const T*, T*, std::int64_t, std::int64_t, Impl);        \
  template void softmax_backward<T>(const T*, const T*, T*, std::int64_t, std::int64_t,    \
                                    Impl);
CODISTILL_SOFTMAX(float)
CODISTILL_SOFTMAX(double)
#undef CODISTILL_SOFTMAX

// ---- the backend's entry points (kernels/op_list.def) --------------------------------------

using namespace backend_detail;

void CpuBackend::softmax_forward(const Tensor& x, Tensor& y, Queue& q) {
  run_op(*this, Op::softmax, x.dtype(), "softmax", [&]<class T>() {
    cpu::softmax_forward<T>(x.data<T>(), y.data<T>(), x.dim(0), x.dim(-1), impl_of(q));
  });
}

void CpuBackend::softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, Queue& q) {
  run_op(*this, Op::softmax, y.dtype(), "softmax backward", [&]<class T>() {
    cpu::softmax_backward<T>(y.data<T>(), dy.data<T>(), dx.data<T>(), y.dim(0), y.dim(-1), impl_of(q));
  });
}

}  // namespace codistill::kernels::cpu
