// Fused bias + activation kernels, the channel bias, the dropout multiply and the residual
// add (bias_activation.hpp). Every bias gradient is a deterministic reduction: no atomics,
// double accumulators, and a summation order fixed by the shape alone (not by timing or
// the device), so a run is reproducible bit for bit:
//   rows (db[n] = sum_m dy[m,n]):  blocks of 32 columns x 8 row lanes, each block summing a
//       chunk of rows; lanes combined in order, chunks (if more than one) by a second
//       kernel in order.
//   channels (db[c] = sum_{b,s} dy[b,c,s]): a block per (channel, chunk of images), a fixed
//       tree over the block, chunks in order.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/bias_activation.hpp"
#include "kernels/cuda/common.cuh"

namespace codistill::kernels::cuda {
namespace {

using detail::grid_for;
using detail::stream_of;
constexpr int kThreads = 256;

// ---- the activations (formulas of kernels/cpu/activation.cpp, in float) ----------------

// Phi(x) = erfc(-x / sqrt2) / 2: the erfc form keeps the digits of tiny outputs for
// negative x that 1 + erf(.) would cancel away (as the CPU twin).
__device__ __forceinline__ float normal_cdf(float x) {
  return 0.5f * erfcf(-x * 0.70710678118654752f);
}

template <Activation A>
__device__ __forceinline__ float act_forward(float v) {
  if constexpr (A == Activation::relu) return v > 0.0f ? v : 0.0f;
  else if constexpr (A == Activation::gelu) return v * normal_cdf(v);
  else return v;
}

// dy * act'(.) from what the backward keeps: y for relu, the input for gelu.
template <Activation A>
__device__ __forceinline__ float act_backward(float saved, float dy) {
  if constexpr (A == Activation::relu) {
    return saved > 0.0f ? dy : 0.0f;
  } else if constexpr (A == Activation::gelu) {
    const float pdf = 0.39894228040143268f * expf(-0.5f * saved * saved);
    return dy * (normal_cdf(saved) + saved * pdf);
  } else {
    return dy;
  }
}

// ---- elementwise kernels (grid-stride; I is uint32 when the size allows: cheaper %) ------

template <Activation A, class I>
__global__ void bias_act_forward_kernel(float* y, const float* b, float* pre, I total, I N) {
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const float v = y[i] + (b ? b[i % N] : 0.0f);
    if (A == Activation::gelu && pre) pre[i] = v;
    y[i] = act_forward<A>(v);
  }
}

template <Activation A, class I>
__global__ void act_forward_kernel(const float* x, float* y, I n) {
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<I>(gridDim.x) * blockDim.x)
    y[i] = act_forward<A>(x[i]);
}

// saved may be null for none. dx may alias dy (each element read before it is written).
template <Activation A, class I>
__global__ void act_backward_kernel(const float* saved, const float* dy, float* dx, I n) {
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<I>(gridDim.x) * blockDim.x)
    dx[i] = act_backward<A>(A == Activation::none ? 0.0f : saved[i], dy[i]);
}

template <class I>
__global__ void bias_channels_kernel(float* y, const float* b, I total, I C, I S) {
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x)
    y[i] += b[(i / S) % C];
}

template <class I>
__global__ void multiply_kernel(const float* x, const float* mask, float* y, I n) {
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<I>(gridDim.x) * blockDim.x)
    y[i] = x[i] * mask[i];
}

// y may alias a or b (each element read before it is written).
template <class I>
__global__ void add_kernel(const float* a, const float* b, float* y, I n) {
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<I>(gridDim.x) * blockDim.x)
    y[i] = a[i] + b[i];
}

// uint32 indexing when i + grid stride cannot wrap.
bool small_index(std::int64_t n) { return n <= (std::int64_t{1} << 31); }

// Writes the final bias gradient from a double sum, as the CPU twin rounds it.
__device__ __forceinline__ void store_bias(float* db, std::int64_t i, double sum, bool accumulate) {
  db[i] = static_cast<float>(accumulate ? static_cast<double>(db[i]) + sum : sum);
}

// ---- row bias gradient (linear layers) -----------------------------------------------

constexpr int kColTile = 32, kRowLanes = 8;

// Block (32, 8) over columns [32 bx, 32 bx + 32) and rows [R by, R by + R): dpre = dy * act'
// (written when dpre is not null), summed per column. One chunk: the final db; several:
// partial[chunk][col], finished by colsum_finish_kernel.
template <Activation A>
__global__ void colsum_kernel(const float* dy, const float* saved, float* dpre, std::int64_t M,
                              std::int64_t N, std::int64_t R, double* partial, float* db,
                              bool accumulate) {
  __shared__ double lanes[kRowLanes][kColTile + 1];
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * R;
  const std::int64_t r1 = r0 + R < M ? r0 + R : M;
  double acc = 0;
  if (col < N)
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      const std::int64_t i = r * N + col;
      const float g = act_backward<A>(A == Activation::none ? 0.0f : saved[i], dy[i]);
      if (dpre) dpre[i] = g;
      acc += g;
    }
  lanes[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || col >= N) return;
  double sum = 0;
  for (int k = 0; k < kRowLanes; ++k) sum += lanes[k][threadIdx.x];
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

template <Activation A>
void column_sums(const float* dy, const float* saved, float* dpre, float* db, std::int64_t M,
                 std::int64_t N, bool accumulate, const Context& ctx) {
  // Rows per chunk: fixed by M alone (determinism), at least 256, and few enough chunks
  // for gridDim.y.
  std::int64_t R = 256;
  while ((M + R - 1) / R > 65535) R *= 2;
  const std::int64_t chunks = (M + R - 1) / R;
  const std::int64_t tiles = (N + kColTile - 1) / kColTile;
  if (tiles > 0x7fffffff)
    throw std::invalid_argument("bias gradient (cuda): too many columns: " + std::to_string(N));
  double* partial = nullptr;
  if (chunks > 1)
    partial = static_cast<double*>(
        detail::stream_workspace(ctx, sizeof(double) * static_cast<std::size_t>(chunks * N)));
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks));
  colsum_kernel<A><<<grid, dim3(kColTile, kRowLanes), 0, stream_of(ctx)>>>(
      dy, saved, dpre, M, N, R, partial, db, accumulate);
  CODISTILL_CUDA_LAUNCH_CHECK();
  if (chunks > 1) {
    colsum_finish_kernel<<<grid_for(N, kThreads), kThreads, 0, stream_of(ctx)>>>(
        partial, chunks, N, db, accumulate);
    CODISTILL_CUDA_LAUNCH_CHECK();
  }
}

// ---- channel bias gradient (convolutions) --------------------------------------------

// Block (c, chunk): the sum over images [chunk IB, chunk IB + IB) of plane c.
__global__ void channel_sum_kernel(const float* dy, std::int64_t B, std::int64_t C,
                                   std::int64_t S, std::int64_t IB, double* partial, float* db,
                                   bool accumulate) {
  __shared__ double smem[detail::kWarp];
  const std::int64_t c = blockIdx.x;
  const std::int64_t i0 = static_cast<std::int64_t>(blockIdx.y) * IB;
  const std::int64_t i1 = i0 + IB < B ? i0 + IB : B;
  double acc = 0;
  for (std::int64_t i = i0; i < i1; ++i) {
    const float* plane = dy + (i * C + c) * S;
    for (std::int64_t s = threadIdx.x; s < S; s += blockDim.x) acc += plane[s];
  }
  const double sum = detail::block_sum(acc, smem);
  if (threadIdx.x != 0) return;
  if (gridDim.y == 1) store_bias(db, c, sum, accumulate);
  else partial[blockIdx.y * C + c] = sum;
}

template <class Launch>
void launch_sized(std::int64_t n, Launch&& launch) {
  if (small_index(n)) launch(std::uint32_t{0});
  else launch(std::uint64_t{0});
}

template <Activation A>
void bias_act_forward_impl(float* y, const float* b, float* pre, std::int64_t M, std::int64_t N,
                           const Context& ctx) {
  const std::int64_t total = M * N;
  launch_sized(total, [&](auto tag) {
    using I = decltype(tag);
    bias_act_forward_kernel<A, I><<<grid_for(total, kThreads), kThreads, 0, stream_of(ctx)>>>(
        y, b, pre, static_cast<I>(total), static_cast<I>(N));
  });
  CODISTILL_CUDA_LAUNCH_CHECK();
}

template <Activation A>
void act_forward_impl(const float* x, float* y, std::int64_t n, const Context& ctx) {
  launch_sized(n, [&](auto tag) {
    using I = decltype(tag);
    act_forward_kernel<A, I><<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(
        x, y, static_cast<I>(n));
  });
  CODISTILL_CUDA_LAUNCH_CHECK();
}

template <Activation A>
void act_backward_impl(const float* saved, const float* dy, float* dx, std::int64_t n,
                       const Context& ctx) {
  launch_sized(n, [&](auto tag) {
    using I = decltype(tag);
    act_backward_kernel<A, I><<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(
        saved, dy, dx, static_cast<I>(n));
  });
  CODISTILL_CUDA_LAUNCH_CHECK();
}

void check_saved(const char* op, Activation act, const float* saved) {
  if (act != Activation::none && !saved)
    throw std::invalid_argument(std::string(op) +
                                " (cuda): relu needs the forward output, gelu its input");
}

}  // namespace

void bias_activation_forward(float* y, const float* b, float* pre, std::int64_t M, std::int64_t N,
                             Activation act, const Context& ctx) {
  detail::check_nonnegative("bias_activation_forward", M, N);
  if (M == 0 || N == 0 || (act == Activation::none && !b)) return;
  detail::use_device(ctx);
  switch (act) {
    case Activation::none: bias_act_forward_impl<Activation::none>(y, b, pre, M, N, ctx); break;
    case Activation::relu: bias_act_forward_impl<Activation::relu>(y, b, pre, M, N, ctx); break;
    case Activation::gelu: bias_act_forward_impl<Activation::gelu>(y, b, pre, M, N, ctx); break;
  }
}

void bias_activation_backward(const float* dy, const float* saved, float* dpre, float* db,
                              std::int64_t M, std::int64_t N, Activation act, bool accumulate,
                              const Context& ctx) {
  detail::check_nonnegative("bias_activation_backward", M, N);
  check_saved("bias_activation_backward", act, saved);
  if (act != Activation::none && !dpre)
    throw std::invalid_argument("bias_activation_backward (cuda): dpre is null");
  // For none, dpre = dy: a copy only when the caller asked for a separate one.
  float* out = act == Activation::none && dpre == dy ? nullptr : dpre;
  if (N == 0) return;
  detail::use_device(ctx);
  if (M == 0) {  // no rows: the sums are zero
    if (db && !accumulate)
      CODISTILL_CUDA_CHECK(cudaMemsetAsync(db, 0, sizeof(float) * N, detail::stream_of(ctx)));
    return;
  }
  if (!db) {
    if (!out) return;
    switch (act) {
      case Activation::none: act_backward_impl<Activation::none>(saved, dy, out, M * N, ctx); break;
      case Activation::relu: act_backward_impl<Activation::relu>(saved, dy, out, M * N, ctx); break;
      case Activation::gelu: act_backward_impl<Activation::gelu>(saved, dy, out, M * N, ctx); break;
    }
    return;
  }
  switch (act) {  // dpre and the column sums in one pass
    case Activation::none:
      column_sums<Activation::none>(dy, saved, out, db, M, N, accumulate, ctx);
      break;
    case Activation::relu:
      column_sums<Activation::relu>(dy, saved, out, db, M, N, accumulate, ctx);
      break;
    case Activation::gelu:
      column_sums<Activation::gelu>(dy, saved, out, db, M, N, accumulate, ctx);
      break;
  }
}

void activation_forward(const float* x, float* y, std::int64_t n, Activation act,
                        const Context& ctx) {
  detail::check_nonnegative("activation_forward", n);
  if (n == 0 || (act == Activation::none && x == y)) return;
  detail::use_device(ctx);
  switch (act) {
    case Activation::none: act_forward_impl<Activation::none>(x, y, n, ctx); break;
    case Activation::relu: act_forward_impl<Activation::relu>(x, y, n, ctx); break;
    case Activation::gelu: act_forward_impl<Activation::gelu>(x, y, n, ctx); break;
  }
}

void activation_backward(const float* saved, const float* dy, float* dx, std::int64_t n,
                         Activation act, const Context& ctx) {
  detail::check_nonnegative("activation_backward", n);
  check_saved("activation_backward", act, saved);
  if (n == 0 || (act == Activation::none && dx == dy)) return;
  detail::use_device(ctx);
  switch (act) {
    case Activation::none: act_backward_impl<Activation::none>(saved, dy, dx, n, ctx); break;
    case Activation::relu: act_backward_impl<Activation::relu>(saved, dy, dx, n, ctx); break;
    case Activation::gelu: act_backward_impl<Activation::gelu>(saved, dy, dx, n, ctx); break;
  }
}

void bias_add_channels(float* y, const float* b, std::int64_t B, std::int64_t C, std::int64_t S,
                       const Context& ctx) {
  detail::check_nonnegative("bias_add_channels", B, C, S);
  const std::int64_t total = B * C * S;
  if (total == 0) return;
  detail::use_device(ctx);
  launch_sized(total, [&](auto tag) {
    using I = decltype(tag);
    bias_channels_kernel<I><<<grid_for(total, kThreads), kThreads, 0, stream_of(ctx)>>>(
        y, b, static_cast<I>(total), static_cast<I>(C), static_cast<I>(S));
  });
  CODISTILL_CUDA_LAUNCH_CHECK();
}

void bias_grad_channels(const float* dy, float* db, std::int64_t B, std::int64_t C, std::int64_t S,
                        bool accumulate, const Context& ctx) {
  detail::check_nonnegative("bias_grad_channels", B, C, S);
  if (C == 0) return;
  if (C > 0x7fffffff)
    throw std::invalid_argument("bias_grad_channels (cuda): too many channels");
  detail::use_device(ctx);
  if (B == 0 || S == 0) {
    if (!accumulate)
      CODISTILL_CUDA_CHECK(cudaMemsetAsync(db, 0, sizeof(float) * C, stream_of(ctx)));
    return;
  }
  // Images per block: about 16K elements each (enough work per block), fixed by the shape.
  std::int64_t IB = S >= 16384 ? 1 : (16384 + S - 1) / S;
  while ((B + IB - 1) / IB > 65535) IB *= 2;
  const std::int64_t chunks = (B + IB - 1) / IB;
  double* partial = nullptr;
  if (chunks > 1)
    partial = static_cast<double*>(
        detail::stream_workspace(ctx, sizeof(double) * static_cast<std::size_t>(chunks * C)));
  const dim3 grid(static_cast<unsigned>(C), static_cast<unsigned>(chunks));
  channel_sum_kernel<<<grid, kThreads, 0, stream_of(ctx)>>>(dy, B, C, S, IB, partial, db,
                                                            accumulate);
  CODISTILL_CUDA_LAUNCH_CHECK();
  if (chunks > 1) {
    colsum_finish_kernel<<<grid_for(C, kThreads), kThreads, 0, stream_of(ctx)>>>(
        partial, chunks, C, db, accumulate);
    CODISTILL_CUDA_LAUNCH_CHECK();
  }
}

void multiply(const float* x, const float* mask, float* y, std::int64_t n, const Context& ctx) {
  detail::check_nonnegative("multiply", n);
  if (n == 0) return;
  detail::use_device(ctx);
  launch_sized(n, [&](auto tag) {
    using I = decltype(tag);
    multiply_kernel<I><<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(
        x, mask, y, static_cast<I>(n));
  });
  CODISTILL_CUDA_LAUNCH_CHECK();
}

void add(const float* a, const float* b, float* y, std::int64_t n, const Context& ctx) {
  detail::check_nonnegative("add", n);
  if (n == 0) return;
  detail::use_device(ctx);
  launch_sized(n, [&](auto tag) {
    using I = decltype(tag);
    add_kernel<I><<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(a, b, y,
                                                                          static_cast<I>(n));
  });
  CODISTILL_CUDA_LAUNCH_CHECK();
}

}  // namespace codistill::kernels::cuda
