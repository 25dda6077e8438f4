#pragma once
// The causal softmax kernels of the attention core (float32), semantics of AttentionShape in
// kernels/ops.hpp and of the CPU twin's row passes (kernels/cpu/sequence/attention.cpp). The
// products around them are cuBLAS calls (plans/attention_plan.hpp). P is [rows, T] with
// rows = batch * heads * T: row r is row i = r % T of its (sequence, head) block, whose
// columns 0..i are the causal window.
//   softmax:          in place over the scaled scores: P[r, j] = exp(S - max) / sum for
//                     j <= i, exactly 0 for j > i (the saved probabilities).
//   softmax_backward: in place over dP, with the saved P: dS = P (dP - sum_j P dP) for
//                     j <= i, exactly 0 for j > i (the 1/sqrt(head_dim) is the next
//                     products' alpha, as on the CPU).
// A warp per row (grid-stride over rows); a lane owns the columns lane, lane + 32, ... in
// every pass, so it rereads only what it wrote itself. The warp reductions are butterflies
// (fixed order): the same bits run to run.
// Launch: shapes::attention_rows(rows).
#include <cstdint>

#include "kernels/cuda/device/reduce.cuh"
#include "kernels/cuda/launch_shapes.hpp"

// The launch shapes of these kernels (attention.cu launches with them, the SIMT tests too); the
// shared ones (Launch, elementwise, kWarp) are in launch_shapes.hpp.
namespace codistill::kernels::cuda::shapes {

constexpr int kAttentionRowThreads = 256;  // 8 rows per block

inline Launch attention_rows(std::int64_t rows) {
  return {{grid_for(rows, kAttentionRowThreads / kWarp)}, {kAttentionRowThreads}, 0};
}

}  // namespace codistill::kernels::cuda::shapes

namespace codistill::kernels::cuda::device {
inline namespace CODISTILL_DEVICE_ABI {

__device__ __forceinline__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The loop over rows is uniform across a warp (every lane has the same r): the shuffles
// always see all 32 lanes.
__global__ void causal_softmax_kernel(float* __restrict__ P, std::int64_t rows, std::int64_t T) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t warps = blockDim.x / kWarp;
  for (std::int64_t r = blockIdx.x * warps + threadIdx.x / kWarp; r < rows; r += gridDim.x * warps) {
    float* row = P + r * T;
    const std::int64_t i = r % T;
    float mx = -INFINITY;
    for (std::int64_t j = lane; j <= i; j += kWarp) mx = fmaxf(mx, row[j]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (std::int64_t j = lane; j <= i; j += kWarp) {
      const float e = expf(row[j] - mx);
      row[j] = e;
      sum += e;
    }
    const float inv = 1.0f / warp_sum(sum);
    for (std::int64_t j = lane; j < T; j += kWarp) row[j] = j <= i ? row[j] * inv : 0.0f;
  }
}

__global__ void causal_softmax_backward_kernel(const float* __restrict__ P, float* __restrict__ dS,
                                               std::int64_t rows, std::int64_t T) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t warps = blockDim.x / kWarp;
  for (std::int64_t r = blockIdx.x * warps + threadIdx.x / kWarp; r < rows; r += gridDim.x * warps) {
    const float* p = P + r * T;
    float* g = dS + r * T;
    const std::int64_t i = r % T;
    float dot = 0.0f;
    for (std::int64_t j = lane; j <= i; j += kWarp) dot += p[j] * g[j];
    dot = warp_sum(dot);
    for (std::int64_t j = lane; j < T; j += kWarp) g[j] = j <= i ? p[j] * (g[j] - dot) : 0.0f;
  }
}

}  // namespace CODISTILL_DEVICE_ABI
}  // namespace codistill::kernels::cuda::device
