#pragma once
// Embedding kernels (float32), semantics of EmbeddingShape in kernels/ops.hpp and of the CPU
// twin kernels/cpu/sequence/embedding.cpp: ids int32 [N], table/dtable [V, D], y/dy [N, D].
//   check_ids: *verdict = min(*verdict, n) over the rows n whose id is outside [0, V) (the
//              host sets it to kNoBadRow first), so the first bad row whatever the schedule.
//   gather:    y[n, d] = table[ids[n], d], a thread per element (grid-stride); the table
//              float32 or bf16 (a forward-only model's, Op::embedding_bf16_table: its bits
//              widened to float32 by to_f32, exact, so the CPU's bits again).
//   scatter:   dtable[ids[n], d] += dy[n, d] for n = 0, 1, ... in order, with no atomics:
//              a warp owns 32 columns of one band of vocabulary rows and walks every row n
//              of dy in order, adding the rows whose id falls in its band. No two threads
//              touch one element of dtable, and each element receives its additions in the
//              order of n, exactly as the CPU reference and fast path add them: the result
//              is bit-identical to the CPU's, whatever the launch shape or schedule.
// gather and scatter read the verdict first and write nothing when an id was bad: the host
// throws after one synchronization, with y and dtable untouched (embedding.cu).
// Launch: shapes::embedding_check, shapes::elementwise(N * D), shapes::embedding_scatter.
#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "kernels/cuda/device/bf16.cuh"
#include "kernels/cuda/device/reduce.cuh"
#include "kernels/cuda/launch_shapes.hpp"

// The launch shapes of these kernels (embedding.cu launches with them, the SIMT tests too); the
// shared ones (Launch, elementwise, kWarp) are in launch_shapes.hpp.
namespace codistill::kernels::cuda::shapes {

// The id check: a grid-stride loop over the rows, at most 1024 blocks of 256.
inline Launch embedding_check(std::int64_t rows) {
  return {{static_cast<unsigned>(std::clamp<std::int64_t>((rows + 255) / 256, 1, 1024))}, {256}, 0};
}

constexpr int kScatterBandsPerBlock = 8;             // block (32 columns, 8 bands)
constexpr std::int64_t kScatterTargetThreads = 1 << 17;  // enough warps to fill a large GPU

struct EmbeddingScatter {
  Launch pass;                 // grid (column tiles, band groups), block (32, 8)
  std::int64_t band_width = 1; // vocabulary rows per band
};

// Bands of the vocabulary so that columns x bands make about kScatterTargetThreads threads
// (each warp walks all rows, so more bands cost more id reads, fewer leave SMs idle). The
// result does not depend on this choice: every element still sums its rows in order.
inline EmbeddingScatter embedding_scatter(std::int64_t vocab, std::int64_t dim) {
  const std::int64_t tiles = (dim + kWarp - 1) / kWarp;
  if (tiles > 0x7fffffff) throw std::invalid_argument("embedding backward (cuda): too many columns");
  std::int64_t bands = std::clamp<std::int64_t>(kScatterTargetThreads / (tiles * kWarp), 1, vocab < 1 ? 1 : vocab);
  EmbeddingScatter e;
  e.band_width = (vocab + bands - 1) / bands;
  bands = (vocab + e.band_width - 1) / e.band_width;
  const std::int64_t groups = (bands + kScatterBandsPerBlock - 1) / kScatterBandsPerBlock;
  e.pass = {{static_cast<unsigned>(tiles), static_cast<unsigned>(groups < 1 ? 1 : groups)},
            {kWarp, kScatterBandsPerBlock},
            0};
  return e;
}

}  // namespace codistill::kernels::cuda::shapes

namespace codistill::kernels::cuda::device {
inline namespace CODISTILL_DEVICE_ABI {

constexpr unsigned long long kNoBadRow = ~0ull;

__global__ void embedding_check_ids_kernel(const std::int32_t* __restrict__ ids, std::int64_t N, std::int64_t V,
                                           unsigned long long* verdict) {
  for (std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; n < N;
       n += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t id = ids[n];
    if (id < 0 || id >= V) atomicMin(verdict, static_cast<unsigned long long>(n));
  }
}

// A table element as float32. Called unqualified in the gather, so that the SIMT tests can
// run the kernel's own source with a mutated widening (an element type of their own).
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(std::uint16_t bf16_bits) { return bf16_widen(bf16_bits); }

template <class T>
__global__ void embedding_gather_kernel(const std::int32_t* __restrict__ ids, const T* __restrict__ table,
                                        float* __restrict__ y, std::int64_t N, std::int64_t D,
                                        const unsigned long long* verdict) {
  if (*verdict != kNoBadRow) return;
  const std::int64_t total = N * D;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t n = e / D, d = e - n * D;
    y[e] = to_f32(table[static_cast<std::int64_t>(ids[n]) * D + d]);
  }
}

// Block (32, rows of bands): threadIdx.x a column of the block's tile, threadIdx.y a band;
// band b covers ids [b * band_width, (b + 1) * band_width) of the vocabulary. The branch on
// the id is uniform across a warp (one band, one row n), so the loads of dy and the updates
// of dtable stay coalesced.
__global__ void embedding_scatter_kernel(const std::int32_t* __restrict__ ids, const float* __restrict__ dy,
                                         float* __restrict__ dtable, std::int64_t N, std::int64_t V, std::int64_t D,
                                         std::int64_t band_width, const unsigned long long* verdict) {
  if (*verdict != kNoBadRow) return;
  const std::int64_t d = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t lo = (blockIdx.y * static_cast<std::int64_t>(blockDim.y) + threadIdx.y) * band_width;
  if (d >= D || lo >= V) return;
  const std::int64_t hi = lo + band_width < V ? lo + band_width : V;
  for (std::int64_t n = 0; n < N; ++n) {
    const std::int64_t id = ids[n];
    if (id >= lo && id < hi) dtable[id * D + d] += dy[n * D + d];
  }
}

}  // namespace CODISTILL_DEVICE_ABI
}  // namespace codistill::kernels::cuda::device
