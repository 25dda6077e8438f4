#pragma once
// Global average pooling on the CPU: x viewed as [rows, spatial] (rows = batch * channels),
//   forward:  y[r] = (sum of row r in order) / spatial
//   backward: dx[r, i] = dy[r] / spatial   (dx overwritten)
#include <cstdint>

#include "kernels/cpu/impl.hpp"

namespace codistill::kernels::cpu {

template <class T>
void global_avgpool_forward(const T* x, T* y, std::int64_t rows, std::int64_t spatial, Impl impl = Impl::fast);
template <class T>
void global_avgpool_backward(const T* dy, T* dx, std::int64_t rows, std::int64_t spatial, Impl impl = Impl::fast);

// Channels-last maps: x viewed as [batch, spatial, channels] (NHWC, spatial = H*W),
//   forward:  y[b, c] = (sum over i of x[b, i, c], in order of i) / spatial
//   backward: dx[b, i, c] = dy[b, c] / spatial   (dx overwritten)
// The same sums in the same order as the NCHW functions above on the transposed map.
template <class T>
void global_avgpool_nhwc_forward(const T* x, T* y, std::int64_t batch, std::int64_t spatial, std::int64_t channels,
                                 Impl impl = Impl::fast);
template <class T>
void global_avgpool_nhwc_backward(const T* dy, T* dx, std::int64_t batch, std::int64_t spatial,
                                  std::int64_t channels, Impl impl = Impl::fast);

}  // namespace codistill::kernels::cpu
