#pragma once
// Max pooling kernels (float32 NCHW) with the rule of kernels/ops.hpp: each window is
// scanned in row-major order from its first element and a later element wins only when
// strictly greater, so ties go to the first maximum; a NaN is the window's maximum (its
// first NaN wins) — the rule of the CPU twin, kernels/cpu/image/pool.cpp, too.
//   forward:  a thread per output element.
//   backward: a thread per input element gathers dy from the windows that chose it, in the
//             windows' row-major order (the order the CPU scatters in), with the choice
//             recomputed from x: no argmax to keep, no atomics, the same sums bit for bit
//             as the CPU's, overlapping windows included.
#include <cstdint>

#include "kernels/cuda/device_api.cuh"

namespace codistill::kernels::cuda::device {
inline namespace CODISTILL_DEVICE_ABI {

struct PoolDims {
  std::int64_t H, W, K, S, OH, OW;
};

// Index within its plane of the chosen element of window (oh, ow).
__device__ __forceinline__ std::int64_t window_argmax(const float* plane, const PoolDims& d,
                                                      std::int64_t oh, std::int64_t ow) {
  const std::int64_t h0 = oh * d.S, w0 = ow * d.S;
  std::int64_t arg = h0 * d.W + w0;
  float best = plane[arg];
  for (std::int64_t kh = 0; kh < d.K; ++kh)
    for (std::int64_t kw = 0; kw < d.K; ++kw) {
      const std::int64_t idx = (h0 + kh) * d.W + (w0 + kw);
      const float v = plane[idx];
      if (v > best || (v != v && best == best)) {  // greater, or the first NaN
        best = v;
        arg = idx;
      }
    }
  return arg;
}

__global__ void maxpool_forward_kernel(const float* x, float* y, std::int64_t total, PoolDims d) {
  const std::int64_t OHW = d.OH * d.OW, HW = d.H * d.W;
  for (std::int64_t o = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       o < total; o += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t p = o / OHW, r = o % OHW;
    const float* plane = x + p * HW;
    y[o] = plane[window_argmax(plane, d, r / d.OW, r % d.OW)];
  }
}

// The windows covering row (or column) i: [lo, hi] (empty when lo > hi).
__device__ __forceinline__ void covering(std::int64_t i, std::int64_t K, std::int64_t S,
                                         std::int64_t n_out, std::int64_t& lo, std::int64_t& hi) {
  lo = i - K + 1 <= 0 ? 0 : (i - K + S) / S;  // ceil((i - K + 1) / S)
  hi = i / S < n_out - 1 ? i / S : n_out - 1;
}

__global__ void maxpool_backward_kernel(const float* x, const float* dy, float* dx,
                                        std::int64_t total, PoolDims d) {
  const std::int64_t OHW = d.OH * d.OW, HW = d.H * d.W;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t p = i / HW, r = i % HW;
    const float* plane = x + p * HW;
    const float* g = dy + p * OHW;
    std::int64_t oh0, oh1, ow0, ow1;
    covering(r / d.W, d.K, d.S, d.OH, oh0, oh1);
    covering(r % d.W, d.K, d.S, d.OW, ow0, ow1);
    float acc = 0.0f;
    for (std::int64_t oh = oh0; oh <= oh1; ++oh)
      for (std::int64_t ow = ow0; ow <= ow1; ++ow)
        if (window_argmax(plane, d, oh, ow) == r) acc = __fadd_rn(acc, g[oh * d.OW + ow]);
    dx[i] = acc;
  }
}

}  // namespace CODISTILL_DEVICE_ABI
}  // namespace codistill::kernels::cuda::device
