#pragma once
// Global average pooling kernels (float32), the CPU twin's arithmetic (kernels/cpu/image/avgpool):
//   forward:  a thread per row sums its `spatial` values in order, then scales: the CPU's
//             bits exactly (rows are planes of at most a few thousand values, so one thread
//             per plane is cheap next to the convolutions around it).
//   backward: a thread per input element, dx = dy[row] * (1 / spatial).
// Both grid-stride loops; launch shapes::elementwise(rows) and (rows * spatial).
#include <cstdint>

#include "kernels/cuda/device_api.cuh"

namespace codistill::kernels::cuda::device {
inline namespace CODISTILL_DEVICE_ABI {

__global__ void global_avgpool_forward_kernel(const float* __restrict__ x, float* __restrict__ y,
                                              std::int64_t rows, std::int64_t spatial) {
  const float inv = 1.0f / static_cast<float>(spatial);
  for (std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float* p = x + r * spatial;
    float s = 0.f;
    for (std::int64_t i = 0; i < spatial; ++i) s = __fadd_rn(s, p[i]);
    y[r] = __fmul_rn(s, inv);
  }
}

__global__ void global_avgpool_backward_kernel(const float* __restrict__ dy, float* __restrict__ dx,
                                               std::int64_t rows, std::int64_t spatial) {
  const float inv = 1.0f / static_cast<float>(spatial);
  const std::int64_t n = rows * spatial;
  for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    dx[k] = __fmul_rn(dy[k / spatial], inv);
}

}  // namespace CODISTILL_DEVICE_ABI
}  // namespace codistill::kernels::cuda::device
