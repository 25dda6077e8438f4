#pragma once
// Batch normalization kernels (float32), semantics of BatchNormShape in kernels/ops.hpp and
// of the CPU twin kernels/cpu/batchnorm.cpp. x is [N, C, S]; one block per channel walks
// that channel's N*S values (N runs of S contiguous floats, C*S apart), so every reduction
// is a block_sum in a fixed order: the results are the same run to run.
//   forward:  training: two passes (mean, then the squared deviations about it), thread 0
//             updates the running statistics and saves mean/invstd; eval: the running
//             statistics. Then the block writes y = x*scale + shift.
//   backward: sums of dy and dy*xh over the channel, thread 0 accumulates dgamma and dbeta,
//             then the block writes dx (training: through the batch statistics; eval: not).
// Launch: shapes::batchnorm (grid C, a multiple of the warp per block, no dynamic smem).
#include <cstdint>

#include "kernels/cuda/device/reduce.cuh"

namespace codistill::kernels::cuda::device {
inline namespace CODISTILL_DEVICE_ABI {

struct BatchNormDims {
  std::int64_t N, C, S;
  float eps, momentum;
  bool training;
};

__device__ __forceinline__ std::int64_t bn_index(const BatchNormDims& d, std::int64_t c, std::int64_t k) {
  const std::int64_t n = k / d.S, i = k - n * d.S;
  return (n * d.C + c) * d.S + i;
}

__global__ void batchnorm_forward_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                         const float* __restrict__ beta, float* running_mean,
                                         float* running_var, float* __restrict__ y, float* save_mean,
                                         float* save_invstd, BatchNormDims d) {
  // Statistics accumulated in double, as the CPU twin does: a channel's sums over N*S
  // elements in float drift from it by more than the op tests' tolerance.
  __shared__ double smem[kWarp];
  __shared__ float stats[2];  // mean, invstd for the whole block
  const std::int64_t c = blockIdx.x, M = d.N * d.S;
  if (d.training) {
    double part = 0.0;
    for (std::int64_t k = threadIdx.x; k < M; k += blockDim.x) part += x[bn_index(d, c, k)];
    const double mean = block_sum(part, smem) / static_cast<double>(M);
    part = 0.0;
    for (std::int64_t k = threadIdx.x; k < M; k += blockDim.x) {
      const double v = x[bn_index(d, c, k)] - mean;
      part += v * v;
    }
    const double var = block_sum(part, smem) / static_cast<double>(M);
    if (threadIdx.x == 0) {
      const float unbiased = static_cast<float>(var * static_cast<double>(M) / static_cast<double>(M - 1));
      running_mean[c] = (1.f - d.momentum) * running_mean[c] + d.momentum * static_cast<float>(mean);
      running_var[c] = (1.f - d.momentum) * running_var[c] + d.momentum * unbiased;
      stats[0] = static_cast<float>(mean);
      stats[1] = static_cast<float>(1.0 / sqrt(var + static_cast<double>(d.eps)));
    }
  } else if (threadIdx.x == 0) {
    stats[0] = running_mean[c];
    stats[1] = rsqrtf(running_var[c] + d.eps);
  }
  __syncthreads();
  const float mean = stats[0], invstd = stats[1];
  if (threadIdx.x == 0) {
    save_mean[c] = mean;
    save_invstd[c] = invstd;
  }
  const float scale = invstd * gamma[c], shift = beta[c] - mean * scale;
  for (std::int64_t k = threadIdx.x; k < M; k += blockDim.x) {
    const std::int64_t at = bn_index(d, c, k);
    y[at] = x[at] * scale + shift;
  }
}

// dx may be null.
__global__ void batchnorm_backward_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                          const float* __restrict__ save_mean,
                                          const float* __restrict__ save_invstd, const float* __restrict__ dy,
                                          float* __restrict__ dx, float* dgamma, float* dbeta, BatchNormDims d) {
  // In double, as the CPU twin: dx = g (dy - mean(dy) - xh mean(dy xh)) cancels almost
  // entirely when a channel has few elements (N*S = 2: xh = +-1), and float arithmetic
  // (with the FMAs nvcc contracts) then leaves errors of 1e-4 relative.
  __shared__ double smem[kWarp];
  const std::int64_t c = blockIdx.x, M = d.N * d.S;
  const double mean = save_mean[c], invstd = save_invstd[c];
  double a = 0.0, b = 0.0;
  for (std::int64_t k = threadIdx.x; k < M; k += blockDim.x) {
    const std::int64_t at = bn_index(d, c, k);
    a += dy[at];
    b += dy[at] * ((x[at] - mean) * invstd);
  }
  const double sum_dy = block_sum(a, smem);
  const double sum_dy_xh = block_sum(b, smem);
  if (threadIdx.x == 0) {
    dbeta[c] += static_cast<float>(sum_dy);
    dgamma[c] += static_cast<float>(sum_dy_xh);
  }
  if (!dx) return;
  const double g = gamma[c] * invstd;
  const double mean_dy = sum_dy / static_cast<double>(M), mean_dy_xh = sum_dy_xh / static_cast<double>(M);
  for (std::int64_t k = threadIdx.x; k < M; k += blockDim.x) {
    const std::int64_t at = bn_index(d, c, k);
    dx[at] = static_cast<float>(d.training ? g * (dy[at] - mean_dy - (x[at] - mean) * invstd * mean_dy_xh)
                                           : g * dy[at]);
  }
}

}  // namespace CODISTILL_DEVICE_ABI
}  // namespace codistill::kernels::cuda::device
