#pragma once
// Batch normalization kernels (float32), semantics of BatchNormShape in kernels/ops.hpp and
// of the CPU twin kernels/cpu/image/batchnorm.cpp. x is [N, C, S]: a channel's M = N*S values are
// N runs of S contiguous floats, C*S apart.
//
// A channel is cut into `chunks` ranges of `per_chunk` values, a block each (grid {C,
// chunks}): a ResNet's first stage has 16 channels of 200k values at batch 256, and one
// block per channel left most of a GPU idle (two thirds of a ResNet-8 step's GPU time on an
// H200 went to batch norm). Each pass writes one double per (channel, chunk) to `partial`
// (the queue's scratch memory); the next pass's blocks add a channel's partials in chunk
// order, so every statistic is the same bits run to run. Sums are in double, as the CPU
// twin's: the input gradient nearly cancels when a channel has few values (M = 2: xh =
// +-1), and float arithmetic with nvcc's contracted FMAs missed it by 4e-5 relative.
//   forward, training: sum_kernel (partial sums of x), sqdev_kernel (the mean from them,
//            partial sums of squared deviations about it), normalize_kernel (mean and
//            variance from the partials; block (c, 0) updates the running statistics and
//            saves mean/invstd; every block writes its y).
//   forward, eval: normalize_kernel alone, from the running statistics.
//   backward: backward_sums_kernel (partial sums of dy and dy*xh), backward_dx_kernel
//            (block (c, 0) accumulates dgamma and dbeta; every block writes its dx:
//            training through the batch statistics, eval not).
// A fused relu (Op::batchnorm_activation), as the CPU twin: `relu` in the dims makes the
// normalize pass write relu(y) (NaN -> 0); a non-null relu_y (that output) makes both backward
// passes read dz = dy * [y > 0] in place of dy. One flag on the same kernels, not copies: the
// fused and plain paths share every sum and every launch shape.
// Launch: shapes::batchnorm (grid {C, chunks}, whole warps per block, no dynamic smem;
// partials: 2 * C * chunks doubles).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "kernels/cuda/device/elementwise.cuh"
#include "kernels/cuda/device/reduce.cuh"
#include "kernels/cuda/launch_shapes.hpp"

// The launch shapes of these kernels (batchnorm.cu launches with them, the SIMT tests too); the
// shared ones (Launch, elementwise, kWarp) are in launch_shapes.hpp.
namespace codistill::kernels::cuda::shapes {

constexpr std::int64_t kBatchNormChunk = 4096;  // a channel's values per block: 16 per thread
constexpr std::int64_t kBatchNormMaxChunks = 1024;

struct BatchNormLaunch {
  std::int64_t chunks = 1, per_chunk = 1;  // blocks per channel, values per block (the last fewer)
  Launch pass;                             // grid {C, chunks}, whole warps per block
  std::size_t partial_bytes = 0;           // scratch: 2 doubles per (channel, chunk)
};

// 256 threads, fewer for a chunk of few values (still whole warps).
inline BatchNormLaunch batchnorm(std::int64_t C, std::int64_t per_channel) {
  if (C > 0x7fffffff) throw std::invalid_argument("batchnorm (cuda): too many channels");
  BatchNormLaunch b;
  const std::int64_t M = per_channel < 1 ? 1 : per_channel;
  b.chunks = std::clamp<std::int64_t>((M + kBatchNormChunk - 1) / kBatchNormChunk, 1, kBatchNormMaxChunks);
  b.per_chunk = (M + b.chunks - 1) / b.chunks;
  const std::int64_t warps = std::clamp<std::int64_t>((b.per_chunk + kWarp - 1) / kWarp, 1, kElementwiseThreads / kWarp);
  b.pass = {{static_cast<unsigned>(C < 1 ? 1 : C), static_cast<unsigned>(b.chunks)}, {static_cast<unsigned>(warps * kWarp)}, 0};
  b.partial_bytes = 2 * static_cast<std::size_t>(C) * static_cast<std::size_t>(b.chunks) * sizeof(double);
  return b;
}

}  // namespace codistill::kernels::cuda::shapes

namespace codistill::kernels::cuda::device {
inline namespace CODISTILL_DEVICE_ABI {

struct BatchNormDims {
  std::int64_t N, C, S;
  float eps, momentum;
  bool training;
  std::int64_t chunks, per_chunk;
  bool relu = false;  // the normalize pass writes relu(y) (Op::batchnorm_activation)
};

__device__ __forceinline__ std::int64_t bn_index(const BatchNormDims& d, std::int64_t c, std::int64_t k) {
  const std::int64_t n = k / d.S, i = k - n * d.S;
  return (n * d.C + c) * d.S + i;
}

// This block's range [begin, end) of its channel's values (empty for a trailing chunk).
__device__ __forceinline__ void bn_chunk(const BatchNormDims& d, std::int64_t& begin, std::int64_t& end) {
  const std::int64_t M = d.N * d.S;
  begin = static_cast<std::int64_t>(blockIdx.y) * d.per_chunk;
  end = begin + d.per_chunk < M ? begin + d.per_chunk : M;
}

// dz at `at`: dy, or with a fused relu (relu_y = the forward's output) dy where y > 0 and 0
// elsewhere: relu's backward rule of elementwise.cuh, the CPU twin's mask.
__device__ __forceinline__ float bn_dz(const float* dy, const float* relu_y, std::int64_t at) {
  return relu_y ? act_backward<Activation::relu>(relu_y[at], dy[at]) : dy[at];
}

// The sum of channel c's partials in chunk order, by thread 0, handed to the whole block.
// Contains __syncthreads: every thread of the block must call it.
__device__ __forceinline__ double bn_total(const double* partial, const BatchNormDims& d, std::int64_t c,
                                           double* slot) {
  if (threadIdx.x == 0) {
    double s = 0.0;
    for (std::int64_t p = 0; p < d.chunks; ++p) s += partial[c * d.chunks + p];
    *slot = s;
  }
  __syncthreads();
  const double v = *slot;
  __syncthreads();  // the slot may be reused right after
  return v;
}

__global__ void batchnorm_sum_kernel(const float* __restrict__ x, double* __restrict__ partial, BatchNormDims d) {
  __shared__ double smem[kWarp];
  const std::int64_t c = blockIdx.x;
  std::int64_t begin, end;
  bn_chunk(d, begin, end);
  double part = 0.0;
  for (std::int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) part += x[bn_index(d, c, k)];
  part = block_sum(part, smem);
  if (threadIdx.x == 0) partial[c * d.chunks + blockIdx.y] = part;
}

__global__ void batchnorm_sqdev_kernel(const float* __restrict__ x, const double* __restrict__ partial_sum,
                                       double* __restrict__ partial_sq, BatchNormDims d) {
  __shared__ double smem[kWarp];
  __shared__ double slot;
  const std::int64_t c = blockIdx.x;
  const double mean = bn_total(partial_sum, d, c, &slot) / static_cast<double>(d.N * d.S);
  std::int64_t begin, end;
  bn_chunk(d, begin, end);
  double part = 0.0;
  for (std::int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) {
    const double v = x[bn_index(d, c, k)] - mean;
    part += v * v;
  }
  part = block_sum(part, smem);
  if (threadIdx.x == 0) partial_sq[c * d.chunks + blockIdx.y] = part;
}

// partial_sum, partial_sq: unused in eval mode (may be null).
__global__ void batchnorm_normalize_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                           const float* __restrict__ beta, float* running_mean,
                                           float* running_var, float* __restrict__ y, float* save_mean,
                                           float* save_invstd, const double* partial_sum,
                                           const double* partial_sq, BatchNormDims d) {
  __shared__ double slot;
  const std::int64_t c = blockIdx.x, M = d.N * d.S;
  float mean, invstd;
  if (d.training) {
    const double m = bn_total(partial_sum, d, c, &slot) / static_cast<double>(M);
    const double var = bn_total(partial_sq, d, c, &slot) / static_cast<double>(M);
    mean = static_cast<float>(m);
    invstd = static_cast<float>(1.0 / sqrt(var + static_cast<double>(d.eps)));
    if (blockIdx.y == 0 && threadIdx.x == 0) {
      // Only block (c, 0) touches channel c's running statistics; no block reads them in
      // training mode.
      const float unbiased = static_cast<float>(var * static_cast<double>(M) / static_cast<double>(M - 1));
      running_mean[c] = (1.f - d.momentum) * running_mean[c] + d.momentum * mean;
      running_var[c] = (1.f - d.momentum) * running_var[c] + d.momentum * unbiased;
    }
  } else {
    mean = running_mean[c];
    invstd = rsqrtf(running_var[c] + d.eps);
  }
  if (blockIdx.y == 0 && threadIdx.x == 0) {
    save_mean[c] = mean;
    save_invstd[c] = invstd;
  }
  const float scale = invstd * gamma[c], shift = beta[c] - mean * scale;
  std::int64_t begin, end;
  bn_chunk(d, begin, end);
  for (std::int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) {
    const std::int64_t at = bn_index(d, c, k);
    const float v = x[at] * scale + shift;
    y[at] = d.relu ? act_forward<Activation::relu>(v) : v;
  }
}

// partial: [2][C * chunks] (sums of dz, then of dz*xh; dz as bn_dz, relu_y may be null).
__global__ void batchnorm_backward_sums_kernel(const float* __restrict__ x, const float* __restrict__ save_mean,
                                               const float* __restrict__ save_invstd, const float* __restrict__ dy,
                                               const float* __restrict__ relu_y, double* __restrict__ partial,
                                               BatchNormDims d) {
  __shared__ double smem[kWarp];
  const std::int64_t c = blockIdx.x;
  const double mean = save_mean[c], invstd = save_invstd[c];
  std::int64_t begin, end;
  bn_chunk(d, begin, end);
  double a = 0.0, b = 0.0;
  for (std::int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) {
    const std::int64_t at = bn_index(d, c, k);
    const double dz = bn_dz(dy, relu_y, at);
    a += dz;
    b += dz * ((x[at] - mean) * invstd);
  }
  a = block_sum(a, smem);
  b = block_sum(b, smem);
  if (threadIdx.x == 0) {
    partial[c * d.chunks + blockIdx.y] = a;
    partial[d.C * d.chunks + c * d.chunks + blockIdx.y] = b;
  }
}

// dx may be null (then only block (c, 0) has work: the parameter gradients); relu_y as in
// the sums kernel.
__global__ void batchnorm_backward_dx_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                             const float* __restrict__ save_mean,
                                             const float* __restrict__ save_invstd, const float* __restrict__ dy,
                                             const float* __restrict__ relu_y, float* __restrict__ dx,
                                             float* dgamma, float* dbeta,
                                             const double* __restrict__ partial, BatchNormDims d) {
  __shared__ double slot;
  if (!dx && blockIdx.y != 0) return;  // the whole block leaves: no barrier is left waiting
  const std::int64_t c = blockIdx.x, M = d.N * d.S;
  const double sum_dy = bn_total(partial, d, c, &slot);
  const double sum_dy_xh = bn_total(partial + d.C * d.chunks, d, c, &slot);
  if (blockIdx.y == 0 && threadIdx.x == 0) {
    dbeta[c] += static_cast<float>(sum_dy);
    dgamma[c] += static_cast<float>(sum_dy_xh);
  }
  if (!dx) return;
  const double mean = save_mean[c], invstd = save_invstd[c];
  const double g = gamma[c] * invstd;
  const double mean_dy = sum_dy / static_cast<double>(M), mean_dy_xh = sum_dy_xh / static_cast<double>(M);
  std::int64_t begin, end;
  bn_chunk(d, begin, end);
  for (std::int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) {
    const std::int64_t at = bn_index(d, c, k);
    const double dz = bn_dz(dy, relu_y, at);
    dx[at] = static_cast<float>(d.training ? g * (dz - mean_dy - (x[at] - mean) * invstd * mean_dy_xh) : g * dz);
  }
}

}  // namespace CODISTILL_DEVICE_ABI
}  // namespace codistill::kernels::cuda::device
