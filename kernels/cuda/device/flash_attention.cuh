#pragma once
// Causal flash attention on CUDA (float32), FlashAttention-2's scheme: semantics and layouts
// of the CPU twin (kernels/cpu/sequence/flash_attention.hpp): qkv [B*T, 3D] (row t: q | k | v,
// head h at columns h*hd..), y/dy [B*T, D], lse [B, H, T]. Never a [T, T] tensor: a block
// holds one 64 x 64 tile of scores in shared memory at a time.
//   forward:     one block per (query tile, head, sequence); the key tiles 0..qt stream
//                through shared memory, the softmax is online (running max m and sum l per
//                row, the output rescaled by exp(m_old - m_new) when the max grows), and
//                only y and lse = m + log(l) are written.
//   row_dot:     the backward's D_i = dy_i . y_i (a warp per row), so that
//                dS = P (dP - D) needs no pass over a full row of P.
//   backward:    flash_attention_backward.cuh.
// Threads: 256 as 16 x 16 (ty, tx). In a score tile a thread owns rows ty + 16r and columns
// tx + 16c (r, c < 4): a row lives in 16 lanes of one warp, so its max and sum are 16-lane
// butterflies (fixed order: the same bits run to run). In an output tile it owns rows
// ty + 16r and columns tx + 16c for c < kCols (head_dim <= 16 kCols, kCols in {2, 4, 8}):
// the output accumulates in registers in float32.
// Shared rows are padded to 16 kCols + 4 floats, zero-filled past head_dim: the dot products
// of the score tiles read 4 columns at a time (128-bit loads, kept aligned), the 8 lanes of a
// quarter-warp that read 8 different rows hit 8 different groups of 4 banks, and the inner
// loops need no column guard.
// Launch: shapes::flash_forward / flash_row_dot (below); the launcher raises the dynamic
// shared memory limit (cudaFuncSetAttribute) when a variant needs more than 48 KiB.
#include <cstdint>

#include "kernels/cuda/device/reduce.cuh"
#include "kernels/cuda/launch_shapes.hpp"

namespace codistill::kernels::cuda::shapes {

constexpr int kFlashTile = 64;       // query and key rows per tile
constexpr int kFlashThreads = 256;   // 16 x 16
constexpr int kFlashMaxHeadDim = 128;

// Column groups of 16 per thread: the template variant of the tile kernels (0: none fits).
inline int flash_cols(std::int64_t head_dim) {
  return head_dim <= 32 ? 2 : head_dim <= 64 ? 4 : head_dim <= kFlashMaxHeadDim ? 8 : 0;
}
inline std::size_t flash_ld(int cols) { return static_cast<std::size_t>(16 * cols + 4); }
// A score tile's row, padded as the others (a multiple of 4, 4 banks on from the last).
constexpr std::size_t kFlashScoreLd = kFlashTile + 4;
inline unsigned flash_tiles(std::int64_t seq) { return static_cast<unsigned>((seq + kFlashTile - 1) / kFlashTile); }

// smem: q, k, v tiles and the probability tile.
inline Launch flash_forward(std::int64_t batch, std::int64_t seq, std::int64_t heads, int cols) {
  const std::size_t floats = 3 * kFlashTile * flash_ld(cols) + kFlashTile * kFlashScoreLd;
  return {{flash_tiles(seq), static_cast<unsigned>(heads), static_cast<unsigned>(batch)}, {kFlashThreads},
          floats * sizeof(float)};
}
// smem: k, v, q, dy tiles, the P and dS tiles, a tile's lse and D.
inline Launch flash_backward_dkdv(std::int64_t batch, std::int64_t seq, std::int64_t heads, int cols) {
  const std::size_t floats = 4 * kFlashTile * flash_ld(cols) + 2 * kFlashTile * kFlashScoreLd + 2 * kFlashTile;
  return {{flash_tiles(seq), static_cast<unsigned>(heads), static_cast<unsigned>(batch)}, {kFlashThreads},
          floats * sizeof(float)};
}
// smem: q, dy, k, v tiles, the dS tile, the query tile's lse and D.
inline Launch flash_backward_dq(std::int64_t batch, std::int64_t seq, std::int64_t heads, int cols) {
  const std::size_t floats = 4 * kFlashTile * flash_ld(cols) + kFlashTile * kFlashScoreLd + 2 * kFlashTile;
  return {{flash_tiles(seq), static_cast<unsigned>(heads), static_cast<unsigned>(batch)}, {kFlashThreads},
          floats * sizeof(float)};
}
constexpr int kFlashRowDotThreads = 256;  // 8 rows (warps) per block
inline Launch flash_row_dot(std::int64_t rows) {
  return {{grid_for(rows, kFlashRowDotThreads / kWarp)}, {kFlashRowDotThreads}, 0};
}

}  // namespace codistill::kernels::cuda::shapes

namespace codistill::kernels::cuda::device {
inline namespace CODISTILL_DEVICE_ABI {

constexpr int kFlashB = shapes::kFlashTile;
constexpr int kFlashR = kFlashB / 16;  // rows (and score columns) per thread
constexpr int kFlashPld = static_cast<int>(shapes::kFlashScoreLd);

// Max and sum over the 16 lanes that share a row (xor offsets below 16 stay in the half-warp;
// every lane of the warp takes part, so the full mask is right).
__device__ __forceinline__ float row16_max(float v) {
  for (int o = 8; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float row16_sum(float v) {
  for (int o = 8; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Rows r0.. r0 + 63 of a [T, *] matrix with row stride `stride` (head columns at src) into
// tile[64][ld]: rows past T and columns past hd as zeros (so that padded lanes compute
// harmless zeros). Coalesced: consecutive threads take consecutive columns.
__device__ __forceinline__ void flash_load_tile(float* tile, const float* __restrict__ src, int r0, int T, int hd,
                                                int ld, std::int64_t stride) {
  for (int e = threadIdx.x; e < kFlashB * ld; e += blockDim.x) {
    const int r = e / ld, d = e - r * ld;
    tile[e] = (r0 + r < T && d < hd) ? src[static_cast<std::int64_t>(r0 + r) * stride + d] : 0.0f;
  }
}

// s[r][c] = row ty + 16r of a . row tx + 16c of b (tiles [64][ld]), over the columns below hd
// rounded up to 4 (the padded columns are zeros), 4 columns per 128-bit load.
template <int ld>
__device__ __forceinline__ void flash_dot_tile(const float* a, const float* b, int hd,
                                               float (&s)[kFlashR][kFlashR]) {
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (int r = 0; r < kFlashR; ++r)
    for (int c = 0; c < kFlashR; ++c) s[r][c] = 0.0f;
  for (int d = 0; d < hd; d += 4) {
    float4 av[kFlashR], bv[kFlashR];
    for (int r = 0; r < kFlashR; ++r) av[r] = *reinterpret_cast<const float4*>(a + (ty + 16 * r) * ld + d);
    for (int c = 0; c < kFlashR; ++c) bv[c] = *reinterpret_cast<const float4*>(b + (tx + 16 * c) * ld + d);
    for (int r = 0; r < kFlashR; ++r)
      for (int c = 0; c < kFlashR; ++c) {
        s[r][c] += av[r].x * bv[c].x;
        s[r][c] += av[r].y * bv[c].y;
        s[r][c] += av[r].z * bv[c].z;
        s[r][c] += av[r].w * bv[c].w;
      }
  }
}

// acc[r][c] += sum_j S[ty + 16r][j] tile[j][tx + 16c] for j below n rounded up to 4 (S a
// score tile [64][kFlashPld], tile [64][ld]; the entries past n are zeros in both), 4 of a
// row's scores per 128-bit load.
template <int kCols>
__device__ __forceinline__ void flash_scores_times_tile(const float* S, const float* tile, int n,
                                                        float (&acc)[kFlashR][kCols]) {
  constexpr int ld = 16 * kCols + 4;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (int j = 0; j < n; j += 4) {
    float4 sv[kFlashR];
    for (int r = 0; r < kFlashR; ++r) sv[r] = *reinterpret_cast<const float4*>(S + (ty + 16 * r) * kFlashPld + j);
    for (int c = 0; c < kCols; ++c) {
      const float* col = tile + j * ld + tx + 16 * c;
      const float v0 = col[0], v1 = col[ld], v2 = col[2 * ld], v3 = col[3 * ld];
      for (int r = 0; r < kFlashR; ++r) {
        acc[r][c] += sv[r].x * v0;
        acc[r][c] += sv[r].y * v1;
        acc[r][c] += sv[r].z * v2;
        acc[r][c] += sv[r].w * v3;
      }
    }
  }
}

// Grid: (query tiles, heads, batch). Query tile qt = last - blockIdx.x: the tiles with the
// most key tiles start first, so the short ones fill in at the end of the wave.
template <int kCols>
__global__ void __launch_bounds__(256) flash_forward_kernel(const float* __restrict__ qkv, float* __restrict__ y,
                                                            float* __restrict__ lse, int T, int H, int hd,
                                                            float scale) {
  constexpr int ld = 16 * kCols + 4;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int qt = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z, i0 = qt * kFlashB;
  const std::int64_t D = static_cast<std::int64_t>(H) * hd, stride = 3 * D;
  const float* q = qkv + static_cast<std::int64_t>(b) * T * stride + static_cast<std::int64_t>(h) * hd;
  float* sQ = dynamic_smem<float>();
  float *sK = sQ + kFlashB * ld, *sV = sK + kFlashB * ld, *sP = sV + kFlashB * ld;
  flash_load_tile(sQ, q, i0, T, hd, ld, stride);  // complete at the first barrier below
  float m[kFlashR], l[kFlashR], acc[kFlashR][kCols];
  for (int r = 0; r < kFlashR; ++r) {
    m[r] = -INFINITY, l[r] = 0.0f;
    for (int c = 0; c < kCols; ++c) acc[r][c] = 0.0f;
  }
  for (int kt = 0; kt <= qt; ++kt) {
    const int j0 = kt * kFlashB;
    __syncthreads();  // every thread is done with the last key tile's sK and sV
    flash_load_tile(sK, q + D, j0, T, hd, ld, stride);
    flash_load_tile(sV, q + 2 * D, j0, T, hd, ld, stride);
    __syncthreads();  // the tiles are complete
    float s[kFlashR][kFlashR];
    flash_dot_tile<ld>(sQ, sK, hd, s);
    for (int r = 0; r < kFlashR; ++r) {
      const int i = i0 + ty + 16 * r;
      float mx = -INFINITY;
      for (int c = 0; c < kFlashR; ++c) {
        const int j = j0 + tx + 16 * c;
        s[r][c] = (j <= i && j < T) ? s[r][c] * scale : -INFINITY;  // causal mask, padded keys
        mx = fmaxf(mx, s[r][c]);
      }
      const float m_new = fmaxf(m[r], row16_max(mx));
      // A row with no visible key yet (m_new = -inf) keeps p = 0 instead of exp(-inf + inf).
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = expf(m[r] - base);
      float sum = 0.0f;
      for (int c = 0; c < kFlashR; ++c) sum += (s[r][c] = expf(s[r][c] - base));  // now P
      l[r] = l[r] * alpha + row16_sum(sum);
      m[r] = m_new;
      for (int c = 0; c < kCols; ++c) acc[r][c] *= alpha;
    }
    for (int r = 0; r < kFlashR; ++r)
      for (int c = 0; c < kFlashR; ++c) sP[(ty + 16 * r) * kFlashPld + tx + 16 * c] = s[r][c];
    // A thread reads back only its own rows of P, which the 16 lanes of its own half-warp
    // wrote: a warp barrier suffices.
    __syncwarp();
    flash_scores_times_tile<kCols>(sP, sV, T - j0 < kFlashB ? T - j0 : kFlashB, acc);
  }
  for (int r = 0; r < kFlashR; ++r) {
    const int i = i0 + ty + 16 * r;
    if (i >= T) continue;
    // Every row sees its own key, so l >= 1 here: no 0/0.
    const float inv = 1.0f / l[r];
    float* out = y + (static_cast<std::int64_t>(b) * T + i) * D + static_cast<std::int64_t>(h) * hd;
    for (int c = 0; c < kCols; ++c)
      if (tx + 16 * c < hd) out[tx + 16 * c] = acc[r][c] * inv;
    if (tx == 0) lse[(static_cast<std::int64_t>(b) * H + h) * T + i] = m[r] + logf(l[r]);
  }
}

// rowdot[(b H + h) T + i] = dy_i . y_i over head h's columns; a warp per row, grid-stride
// (the loop is uniform across a warp, so the shuffles see all 32 lanes).
__global__ void flash_row_dot_kernel(const float* __restrict__ dy, const float* __restrict__ y,
                                     float* __restrict__ rowdot, std::int64_t rows, int T, int H, int hd) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t warps = blockDim.x / kWarp, D = static_cast<std::int64_t>(H) * hd;
  for (std::int64_t r = blockIdx.x * warps + threadIdx.x / kWarp; r < rows; r += gridDim.x * warps) {
    const std::int64_t i = r % T, bh = r / T, b = bh / H, h = bh % H;
    const std::int64_t at = (b * T + i) * D + h * hd;
    float v = 0.0f;
    for (int d = lane; d < hd; d += kWarp) v += dy[at + d] * y[at + d];
    v = warp_sum(v);
    if (lane == 0) rowdot[r] = v;
  }
}

}  // namespace CODISTILL_DEVICE_ABI
}  // namespace codistill::kernels::cuda::device
