#include "kernels/cpu/image/avgpool.hpp"

#include <omp.h>

#include <stdexcept>
#include <string>

#include "kernels/cpu/backend_impl.hpp"
#include "kernels/cpu/backend_util.hpp"

namespace codistill::kernels::cpu {
namespace {

constexpr std::int64_t kParallelMin = 1 << 14;

void check(std::int64_t rows, std::int64_t spatial) {
  if (rows < 0 || spatial < 1)
    throw std::invalid_argument("global_avgpool: rows must be >= 0 and spatial >= 1, got rows " +
                                std::to_string(rows) + ", spatial " + std::to_string(spatial));
}

// The channels-last pair's arguments: [batch, spatial, channels] maps.
void check_nhwc(std::int64_t batch, std::int64_t spatial, std::int64_t channels) {
  if (channels < 1) throw std::invalid_argument("global_avgpool: channels must be >= 1, got " + std::to_string(channels));
  check(batch * channels, spatial);
}

}  // namespace

template <class T>
void global_avgpool_forward(const T* x, T* y, std::int64_t rows, std::int64_t spatial, Impl impl) {
  check(rows, spatial);
  const T inv = T(1) / static_cast<T>(spatial);
  if (impl == Impl::reference) {
    for (std::int64_t r = 0; r < rows; ++r) {
      T s = 0;
      for (std::int64_t i = 0; i < spatial; ++i) s += x[r * spatial + i];
      y[r] = s * inv;
    }
    return;
  }
  // In order within a row (the CUDA twin sums the same way): no reassociation, so the
  // fast path parallelizes over rows only.
  const bool par = rows * spatial >= kParallelMin && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* p = x + r * spatial;
    T s = 0;
    for (std::int64_t i = 0; i < spatial; ++i) s += p[i];
    y[r] = s * inv;
  }
}

template <class T>
void global_avgpool_backward(const T* dy, T* dx, std::int64_t rows, std::int64_t spatial, Impl impl) {
  check(rows, spatial);
  const T inv = T(1) / static_cast<T>(spatial);
  const bool par = impl == Impl::fast && rows * spatial >= kParallelMin && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
  for (std::int64_t r = 0; r < rows; ++r) {
    const T g = dy[r] * inv;
    T* q = dx + r * spatial;
#pragma omp simd
    for (std::int64_t i = 0; i < spatial; ++i) q[i] = g;
  }
}

template <class T>
void global_avgpool_nhwc_forward(const T* x, T* y, std::int64_t batch, std::int64_t spatial, std::int64_t channels,
                                 Impl impl) {
  check_nhwc(batch, spatial, channels);
  const T inv = T(1) / static_cast<T>(spatial);
  // Each channel's sum runs over i in order, as the NCHW rows do; the fast path adds the
  // pixels' channel vectors one pixel after another (vectorized across channels).
  const bool par = impl == Impl::fast && batch * spatial * channels >= kParallelMin && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
  for (std::int64_t b = 0; b < batch; ++b) {
    T* out = y + b * channels;
    for (std::int64_t c = 0; c < channels; ++c) out[c] = 0;
    for (std::int64_t i = 0; i < spatial; ++i) {
      const T* p = x + (b * spatial + i) * channels;
#pragma omp simd
      for (std::int64_t c = 0; c < channels; ++c) out[c] += p[c];
    }
    for (std::int64_t c = 0; c < channels; ++c) out[c] *= inv;
  }
}

template <class T>
void global_avgpool_nhwc_backward(const T* dy, T* dx, std::int64_t batch, std::int64_t spatial, std::int64_t channels,
                                  Impl impl) {
  check_nhwc(batch, spatial, channels);
  const T inv = T(1) / static_cast<T>(spatial);
  const bool par = impl == Impl::fast && batch * spatial * channels >= kParallelMin && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < spatial; ++i) {
      T* q = dx + (b * spatial + i) * channels;
#pragma omp simd
      for (std::int64_t c = 0; c < channels; ++c) q[c] = dy[b * channels + c] * inv;
    }
}

template void global_avgpool_forward<float>(const float*, float*, std::int64_t, std::int64_t, Impl);
template void global_avgpool_forward<double>(const double*, double*, std::int64_t, std::int64_t, Impl);
template void global_avgpool_backward<float>(const float*, float*, std::int64_t, std::int64_t, Impl);
template void global_avgpool_backward<double>(const double*, double*, std::int64_t, std::int64_t, Impl);
template void global_avgpool_nhwc_forward<float>(const float*, float*, std::int64_t, std::int64_t, std::int64_t, Impl);
template void global_avgpool_nhwc_forward<double>(const double*, double*, std::int64_t, std::int64_t, std::int64_t,
                                                  Impl);
template void global_avgpool_nhwc_backward<float>(const float*, float*, std::int64_t, std::int64_t, std::int64_t, Impl);
template void global_avgpool_nhwc_backward<double>(const double*, double*, std::int64_t, std::int64_t, std::int64_t,
                                                   Impl);

// ---- the backend's entry points (kernels/op_list.def) --------------------------------------

using namespace backend_detail;

void CpuBackend::global_avgpool_forward(const Tensor& x, Tensor& y, std::int64_t rows, std::int64_t spatial,
                                        std::int64_t channels, Queue& q) {
  run_op(*this, Op::global_avgpool, x.dtype(), "global_avgpool", [&]<class T>() {
    if (channels == 1)
      cpu::global_avgpool_forward<T>(x.data<T>(), y.data<T>(), rows, spatial, impl_of(q));
    else
      cpu::global_avgpool_nhwc_forward<T>(x.data<T>(), y.data<T>(), rows, spatial, channels, impl_of(q));
  });
}

void CpuBackend::global_avgpool_backward(const Tensor& dy, Tensor& dx, std::int64_t rows, std::int64_t spatial,
                                         std::int64_t channels, Queue& q) {
  run_op(*this, Op::global_avgpool, dy.dtype(), "global_avgpool backward", [&]<class T>() {
    if (channels == 1)
      cpu::global_avgpool_backward<T>(dy.data<T>(), dx.data<T>(), rows, spatial, impl_of(q));
    else
      cpu::global_avgpool_nhwc_backward<T>(dy.data<T>(), dx.data<T>(), rows, spatial, channels, impl_of(q));
  });
}

}  // namespace codistill::kernels::cpu
