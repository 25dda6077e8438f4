#pragma once
// The backward of causal flash attention on CUDA (float32); conventions (tiles, threads,
// padded shared rows, layouts) of flash_attention.cuh. Each probability is recomputed from the
// saved lse as P_ij = exp(scale q_i . k_j - lse_i), and dS_ij = P_ij (dy_i . v_j - D_i) with
// D_i = dy_i . y_i (flash_row_dot_kernel, run first). Then
//   dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i,  dv_j = sum_i P_ij dy_i.
// Two kernels, each owning its outputs outright:
//   dkdv: one block per (key tile, head, sequence), walking the query tiles at or below the
//         diagonal; dk and dv accumulate in registers.
//   dq:   one block per (query tile, head, sequence), walking the key tiles 0..qt; dq in
//         registers.
// Why not FlashAttention-2's single pass with dq added by atomicAdd: float atomics add in a
// different order every run (this project keeps results the same bits run to run), and dq
// lives interleaved in dqkv, which would have to be zeroed first. The price is computing S
// and dP twice (7 tile products instead of 5), with no atomics and no extra memory but D.
#include <cstdint>

#include "kernels/cuda/device/flash_attention.cuh"

namespace codistill::kernels::cuda::device {
inline namespace CODISTILL_DEVICE_ABI {

// P and dS of the tile (query rows i0 + ty + 16r, key columns j0 + tx + 16c) from the q, dy,
// k, v tiles and the query rows' lse and D: masked (j > i) and padded entries exactly 0.
template <int kCols>
__device__ __forceinline__ void flash_probs_grads(const float* sQ, const float* sdO, const float* sK,
                                                  const float* sV, const float* sL, const float* sD, int i0,
                                                  int j0, int T, int hd, float scale,
                                                  float (&p)[kFlashR][kFlashR], float (&ds)[kFlashR][kFlashR]) {
  constexpr int ld = 16 * kCols + 4;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float s[kFlashR][kFlashR], dp[kFlashR][kFlashR];
  flash_dot_tile<ld>(sQ, sK, hd, s);
  flash_dot_tile<ld>(sdO, sV, hd, dp);
  for (int r = 0; r < kFlashR; ++r) {
    const int il = ty + 16 * r, i = i0 + il;
    for (int c = 0; c < kFlashR; ++c) {
      const int j = j0 + tx + 16 * c;
      p[r][c] = (j <= i && i < T) ? expf(s[r][c] * scale - sL[il]) : 0.0f;
      ds[r][c] = p[r][c] * (dp[r][c] - sD[il]);
    }
  }
}

// A tile's lse and D (zeros past T: those rows' P is masked to 0 anyway).
__device__ __forceinline__ void flash_load_rows(float* sL, float* sD, const float* __restrict__ lse,
                                                const float* __restrict__ rowdot, int r0, int T) {
  for (int e = threadIdx.x; e < kFlashB; e += blockDim.x) {
    sL[e] = r0 + e < T ? lse[r0 + e] : 0.0f;
    sD[e] = r0 + e < T ? rowdot[r0 + e] : 0.0f;
  }
}

// Grid: (key tiles, heads, batch); key tile kt = blockIdx.x (the low tiles see the most query
// tiles and start first). Writes the k and v columns of dqkv for its rows.
template <int kCols>
__global__ void __launch_bounds__(256) flash_backward_dkdv_kernel(const float* __restrict__ qkv,
                                                                  const float* __restrict__ dy,
                                                                  const float* __restrict__ lse,
                                                                  const float* __restrict__ rowdot,
                                                                  float* __restrict__ dqkv, int T, int H, int hd,
                                                                  float scale) {
  constexpr int ld = 16 * kCols + 4;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, j0 = kt * kFlashB;
  const int nq = static_cast<int>(gridDim.x);
  const std::int64_t D = static_cast<std::int64_t>(H) * hd, stride = 3 * D;
  const std::int64_t head = static_cast<std::int64_t>(h) * hd, bh = static_cast<std::int64_t>(b) * H + h;
  const float* q = qkv + static_cast<std::int64_t>(b) * T * stride + head;
  const float* g = dy + static_cast<std::int64_t>(b) * T * D + head;
  float* sK = dynamic_smem<float>();
  float *sV = sK + kFlashB * ld, *sQ = sV + kFlashB * ld, *sdO = sQ + kFlashB * ld, *sP = sdO + kFlashB * ld;
  float *sdS = sP + kFlashB * kFlashPld, *sL = sdS + kFlashB * kFlashPld, *sD = sL + kFlashB;
  flash_load_tile(sK, q + D, j0, T, hd, ld, stride);  // complete at the second barrier below
  flash_load_tile(sV, q + 2 * D, j0, T, hd, ld, stride);
  float dk[kFlashR][kCols], dv[kFlashR][kCols];
  for (int r = 0; r < kFlashR; ++r)
    for (int c = 0; c < kCols; ++c) dk[r][c] = 0.0f, dv[r][c] = 0.0f;
  for (int qt = kt; qt < nq; ++qt) {
    const int i0 = qt * kFlashB;
    __syncthreads();  // every thread is done with the last query tile's sQ, sdO, sP and sdS
    flash_load_tile(sQ, q, i0, T, hd, ld, stride);
    flash_load_tile(sdO, g, i0, T, hd, ld, D);
    flash_load_rows(sL, sD, lse + bh * T, rowdot + bh * T, i0, T);
    __syncthreads();  // the tiles are complete
    float p[kFlashR][kFlashR], ds[kFlashR][kFlashR];
    flash_probs_grads<kCols>(sQ, sdO, sK, sV, sL, sD, i0, j0, T, hd, scale, p, ds);
    for (int r = 0; r < kFlashR; ++r)
      for (int c = 0; c < kFlashR; ++c) {
        sP[(ty + 16 * r) * kFlashPld + tx + 16 * c] = p[r][c];
        sdS[(ty + 16 * r) * kFlashPld + tx + 16 * c] = ds[r][c];
      }
    __syncthreads();  // sP and sdS are complete
    // This thread's key rows jl = ty + 16r take column jl of P and dS (transposed products).
    const int in = T - i0 < kFlashB ? T - i0 : kFlashB;
    for (int il = 0; il < in; ++il) {
      float pa[kFlashR], sa[kFlashR];
      for (int r = 0; r < kFlashR; ++r) {
        pa[r] = sP[il * kFlashPld + ty + 16 * r];
        sa[r] = sdS[il * kFlashPld + ty + 16 * r];
      }
      for (int c = 0; c < kCols; ++c) {
        const float o = sdO[il * ld + tx + 16 * c], qv = sQ[il * ld + tx + 16 * c];
        for (int r = 0; r < kFlashR; ++r) dv[r][c] += pa[r] * o, dk[r][c] += sa[r] * qv;
      }
    }
  }
  for (int r = 0; r < kFlashR; ++r) {
    const int j = j0 + ty + 16 * r;
    if (j >= T) continue;
    float* out = dqkv + (static_cast<std::int64_t>(b) * T + j) * stride + head;
    for (int c = 0; c < kCols; ++c) {
      const int d = tx + 16 * c;
      if (d >= hd) continue;
      out[D + d] = dk[r][c] * scale;
      out[2 * D + d] = dv[r][c];
    }
  }
}

// Grid: (query tiles, heads, batch); query tile qt = last - blockIdx.x (longest first).
// Writes the q columns of dqkv for its rows.
template <int kCols>
__global__ void __launch_bounds__(256) flash_backward_dq_kernel(const float* __restrict__ qkv,
                                                                const float* __restrict__ dy,
                                                                const float* __restrict__ lse,
                                                                const float* __restrict__ rowdot,
                                                                float* __restrict__ dqkv, int T, int H, int hd,
                                                                float scale) {
  constexpr int ld = 16 * kCols + 4;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int qt = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z, i0 = qt * kFlashB;
  const std::int64_t D = static_cast<std::int64_t>(H) * hd, stride = 3 * D;
  const std::int64_t head = static_cast<std::int64_t>(h) * hd, bh = static_cast<std::int64_t>(b) * H + h;
  const float* q = qkv + static_cast<std::int64_t>(b) * T * stride + head;
  float* sQ = dynamic_smem<float>();
  float *sdO = sQ + kFlashB * ld, *sK = sdO + kFlashB * ld, *sV = sK + kFlashB * ld, *sdS = sV + kFlashB * ld;
  float *sL = sdS + kFlashB * kFlashPld, *sD = sL + kFlashB;
  // The query tile's rows, complete at the second barrier of the first key tile.
  flash_load_tile(sQ, q, i0, T, hd, ld, stride);
  flash_load_tile(sdO, dy + static_cast<std::int64_t>(b) * T * D + head, i0, T, hd, ld, D);
  flash_load_rows(sL, sD, lse + bh * T, rowdot + bh * T, i0, T);
  float dq[kFlashR][kCols];
  for (int r = 0; r < kFlashR; ++r)
    for (int c = 0; c < kCols; ++c) dq[r][c] = 0.0f;
  for (int kt = 0; kt <= qt; ++kt) {
    const int j0 = kt * kFlashB;
    __syncthreads();  // every thread is done with the last key tile's sK and sdS
    flash_load_tile(sK, q + D, j0, T, hd, ld, stride);
    flash_load_tile(sV, q + 2 * D, j0, T, hd, ld, stride);
    __syncthreads();  // the tiles are complete
    float p[kFlashR][kFlashR], ds[kFlashR][kFlashR];
    flash_probs_grads<kCols>(sQ, sdO, sK, sV, sL, sD, i0, j0, T, hd, scale, p, ds);
    for (int r = 0; r < kFlashR; ++r)
      for (int c = 0; c < kFlashR; ++c) sdS[(ty + 16 * r) * kFlashPld + tx + 16 * c] = ds[r][c];
    // A thread reads back only its own rows of dS, written by its own half-warp (the dkdv
    // kernel's transposed reads need the block barrier instead).
    __syncwarp();
    flash_scores_times_tile<kCols>(sdS, sK, T - j0 < kFlashB ? T - j0 : kFlashB, dq);
  }
  for (int r = 0; r < kFlashR; ++r) {
    const int i = i0 + ty + 16 * r;
    if (i >= T) continue;
    float* out = dqkv + (static_cast<std::int64_t>(b) * T + i) * stride + head;
    for (int c = 0; c < kCols; ++c)
      if (tx + 16 * c < hd) out[tx + 16 * c] = dq[r][c] * scale;
  }
}

}  // namespace CODISTILL_DEVICE_ABI
}  // namespace codistill::kernels::cuda::device
