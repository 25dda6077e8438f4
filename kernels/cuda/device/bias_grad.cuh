#pragma once
// The bias gradients as deterministic reductions: no atomics, double accumulators, and a
// summation order fixed by the shape alone (not by timing or the device), so a run is
// reproducible bit for bit (launch: shapes::column_sums / channel_sums below).
//   rows (db[n] = sum_m dy[m,n]):  blocks of 32 columns x 8 row lanes, each block summing a
//       chunk of rows; lanes combined in order, chunks (if more than one) by
//       colsum_finish_kernel in order.
//   channels (db[c] = sum_{b,s} dy[b,c,s]): a block per (channel, chunk of images), a fixed
//       tree over the block, chunks in order.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/device/elementwise.cuh"
#include "kernels/cuda/device/reduce.cuh"
#include "kernels/cuda/launch_shapes.hpp"

// The launch shapes of these kernels (bias_activation.cu launches with them, the SIMT tests too); the
// shared ones (Launch, elementwise, kWarp) are in launch_shapes.hpp.
namespace codistill::kernels::cuda::shapes {

constexpr int kColTile = 32, kRowLanes = 8;

struct ColumnSums {
  Launch sums;               // colsum_kernel: block (32, 8), grid (column tiles, row chunks)
  std::int64_t rows = 0;     // rows per chunk
  std::int64_t chunks = 0;
  Launch finish;             // colsum_finish_kernel, when chunks > 1
};

// db[n] = sum_m dy[m, n]: rows per chunk fixed by M alone (determinism), at least 256, few
// enough chunks for grid.y.
inline ColumnSums column_sums(std::int64_t M, std::int64_t N) {
  std::int64_t R = 256;
  while ((M + R - 1) / R > 65535) R *= 2;
  const std::int64_t chunks = (M + R - 1) / R;
  const std::int64_t tiles = (N + kColTile - 1) / kColTile;
  if (tiles > 0x7fffffff)
    throw std::invalid_argument("bias gradient (cuda): too many columns: " + std::to_string(N));
  ColumnSums c;
  c.sums = {{static_cast<unsigned>(tiles), static_cast<unsigned>(chunks)},
            {kColTile, kRowLanes}, 0};
  c.rows = R, c.chunks = chunks;
  c.finish = elementwise(N);
  return c;
}

struct ChannelSums {
  Launch sums;                // channel_sum_kernel: a block per (channel, chunk of images)
  std::int64_t images = 0;    // images per chunk
  std::int64_t chunks = 0;
  Launch finish;              // colsum_finish_kernel over C, when chunks > 1
};

// db[c] = sum_{b,s} dy[b, c, s]: about 16K elements per block, fixed by the shape.
inline ChannelSums channel_sums(std::int64_t B, std::int64_t C, std::int64_t S) {
  if (C > 0x7fffffff) throw std::invalid_argument("bias_grad_channels (cuda): too many channels");
  std::int64_t IB = S >= 16384 ? 1 : (16384 + S - 1) / S;
  while ((B + IB - 1) / IB > 65535) IB *= 2;
  ChannelSums c;
  c.images = IB;
  c.chunks = (B + IB - 1) / IB;
  c.sums = {{static_cast<unsigned>(C), static_cast<unsigned>(c.chunks)}, {kElementwiseThreads}, 0};
  c.finish = elementwise(C);
  return c;
}

}  // namespace codistill::kernels::cuda::shapes

namespace codistill::kernels::cuda::device {
inline namespace CODISTILL_DEVICE_ABI {

// Writes the final bias gradient from a double sum, as the CPU twin rounds it.
__device__ __forceinline__ void store_bias(float* db, std::int64_t i, double sum, bool accumulate) {
  db[i] = static_cast<float>(accumulate ? static_cast<double>(db[i]) + sum : sum);
}

// Block (32, 8) over columns [32 bx, 32 bx + 32) and rows [R by, R by + R): dpre = dy * act'
// (written when dpre is not null), summed per column. One chunk: the final db; several:
// partial[chunk][col], finished by colsum_finish_kernel.
template <Activation A>
__global__ void colsum_kernel(const float* dy, const float* saved, float* dpre, std::int64_t M,
                              std::int64_t N, std::int64_t R, double* partial, float* db,
                              bool accumulate) {
  constexpr int kTile = shapes::kColTile, kLanes = shapes::kRowLanes;
  __shared__ double lanes[kLanes][kTile + 1];
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kTile + threadIdx.x;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * R;
  const std::int64_t r1 = r0 + R < M ? r0 + R : M;
  double acc = 0;
  if (col < N)
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kLanes) {
      const std::int64_t i = r * N + col;
      const float g = act_backward<A>(A == Activation::none ? 0.0f : saved[i], dy[i]);
      if (dpre) dpre[i] = g;
      acc += g;
    }
  lanes[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || col >= N) return;
  double sum = 0;
  for (int k = 0; k < kLanes; ++k) sum += lanes[k][threadIdx.x];
  if (gridDim.y == 1) store_bias(db, col, sum, accumulate);
  else partial[blockIdx.y * N + col] = sum;
}

// db[n] (+)= sum over chunks of partial[chunk][n], chunks in order.
__global__ void colsum_finish_kernel(const double* partial, std::int64_t chunks, std::int64_t N,
                                     float* db, bool accumulate) {
  for (std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; n < N;
       n += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    double sum = 0;
    for (std::int64_t c = 0; c < chunks; ++c) sum += partial[c * N + n];
    store_bias(db, n, sum, accumulate);
  }
}

// Block (c, chunk): the sum over images [chunk IB, chunk IB + IB) of plane c.
__global__ void channel_sum_kernel(const float* dy, std::int64_t B, std::int64_t C,
                                   std::int64_t S, std::int64_t IB, double* partial, float* db,
                                   bool accumulate) {
  __shared__ double smem[kWarp];
  const std::int64_t c = blockIdx.x;
  const std::int64_t i0 = static_cast<std::int64_t>(blockIdx.y) * IB;
  const std::int64_t i1 = i0 + IB < B ? i0 + IB : B;
  double acc = 0;
  for (std::int64_t i = i0; i < i1; ++i) {
    const float* plane = dy + (i * C + c) * S;
    for (std::int64_t s = threadIdx.x; s < S; s += blockDim.x) acc += plane[s];
  }
  const double sum = block_sum(acc, smem);
  if (threadIdx.x != 0) return;
  if (gridDim.y == 1) store_bias(db, c, sum, accumulate);
  else partial[blockIdx.y * C + c] = sum;
}

}  // namespace CODISTILL_DEVICE_ABI
}  // namespace codistill::kernels::cuda::device
