#pragma once
// Layer normalization kernels (float32), semantics of LayerNormShape in kernels/ops.hpp and
// of the CPU twin kernels/cpu/sequence/layernorm.cpp. x is [rows, F].
//   forward:        a block per row: block_sum of the row (mean), of the squared deviations
//                   about it (variance), then y; thread 0 saves mean and invstd.
//   backward_dx:    a block per row: the row's sums of g = gamma*dy and g*xh, then dx.
//   backward_param: a thread per feature walks the rows in order: dgamma += sum dy*xh,
//                   dbeta += sum dy, with no atomics (the same bits run to run).
// Launch: shapes::layernorm_rows (grid rows, whole warps) and shapes::elementwise(F).
#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "kernels/cuda/device/reduce.cuh"
#include "kernels/cuda/launch_shapes.hpp"

// The launch shapes of these kernels (layernorm.cu launches with them, the SIMT tests too); the
// shared ones (Launch, elementwise, kWarp) are in launch_shapes.hpp.
namespace codistill::kernels::cuda::shapes {

// A block per row of `features` values (layer normalization): up to 256 threads.
inline Launch layernorm_rows(std::int64_t rows, std::int64_t features) {
  if (rows > 0x7fffffff) throw std::invalid_argument("layernorm (cuda): too many rows");
  const std::int64_t warps = std::clamp<std::int64_t>((features + kWarp - 1) / kWarp, 1, kElementwiseThreads / kWarp);
  return {{static_cast<unsigned>(rows < 1 ? 1 : rows)}, {static_cast<unsigned>(warps * kWarp)}, 0};
}

}  // namespace codistill::kernels::cuda::shapes

namespace codistill::kernels::cuda::device {
inline namespace CODISTILL_DEVICE_ABI {

// Row statistics and the input gradient in double, as the CPU twin computes them: dx is a
// difference of nearly equal terms for short rows (F = 1: exactly 0), which float
// arithmetic with nvcc's contracted FMAs misses by 1e-2 relative.
__global__ void layernorm_forward_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                         const float* __restrict__ beta, float* __restrict__ y, float* save_mean,
                                         float* save_invstd, std::int64_t F, float eps) {
  __shared__ double smem[kWarp];
  const std::int64_t r = blockIdx.x;
  const float* row = x + r * F;
  double part = 0.0;
  for (std::int64_t f = threadIdx.x; f < F; f += blockDim.x) part += row[f];
  const double mean = block_sum(part, smem) / static_cast<double>(F);
  part = 0.0;
  for (std::int64_t f = threadIdx.x; f < F; f += blockDim.x) {
    const double d = row[f] - mean;
    part += d * d;
  }
  const double invstd = 1.0 / sqrt(block_sum(part, smem) / static_cast<double>(F) + static_cast<double>(eps));
  if (threadIdx.x == 0) {
    save_mean[r] = static_cast<float>(mean);
    save_invstd[r] = static_cast<float>(invstd);
  }
  for (std::int64_t f = threadIdx.x; f < F; f += blockDim.x)
    y[r * F + f] = static_cast<float>((row[f] - mean) * invstd * gamma[f] + beta[f]);
}

__global__ void layernorm_backward_dx_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                             const float* __restrict__ save_mean,
                                             const float* __restrict__ save_invstd, const float* __restrict__ dy,
                                             float* __restrict__ dx, std::int64_t F) {
  __shared__ double smem[kWarp];
  const std::int64_t r = blockIdx.x;
  const double mean = save_mean[r], invstd = save_invstd[r];
  double a = 0.0, b = 0.0;
  for (std::int64_t f = threadIdx.x; f < F; f += blockDim.x) {
    const double g = static_cast<double>(gamma[f]) * dy[r * F + f];
    a += g;
    b += g * ((x[r * F + f] - mean) * invstd);
  }
  const double mg = block_sum(a, smem) / static_cast<double>(F);
  const double mgxh = block_sum(b, smem) / static_cast<double>(F);
  for (std::int64_t f = threadIdx.x; f < F; f += blockDim.x) {
    const double xh = (x[r * F + f] - mean) * invstd;
    dx[r * F + f] = static_cast<float>(invstd * (static_cast<double>(gamma[f]) * dy[r * F + f] - mg - xh * mgxh));
  }
}

__global__ void layernorm_backward_param_kernel(const float* __restrict__ x, const float* __restrict__ save_mean,
                                                const float* __restrict__ save_invstd,
                                                const float* __restrict__ dy, float* dgamma, float* dbeta,
                                                std::int64_t rows, std::int64_t F) {
  for (std::int64_t f = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; f < F;
       f += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float g = 0.f, b = 0.f;
    for (std::int64_t r = 0; r < rows; ++r) {
      const float d = dy[r * F + f];
      g += d * ((x[r * F + f] - save_mean[r]) * save_invstd[r]);
      b += d;
    }
    dgamma[f] += g;
    dbeta[f] += b;
  }
}

}  // namespace CODISTILL_DEVICE_ABI
}  // namespace codistill::kernels::cuda::device
