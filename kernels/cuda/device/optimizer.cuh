#pragma once
// The SGD and AdamW update kernels over a table of parameter slices (optimizer.cu uploads
// the table; launch: shapes::optimizer below). Each slice is cut into chunks of
// kOptimizerChunk elements; block b updates chunk b, finding its slice by a binary search
// over the slices' first chunks. One slice (a flat arena) comes by value instead.
//
// The arithmetic is that of codistill/optim/sgd.cpp and adamw.cpp in float32, operation for
// operation, with explicitly rounded intrinsics (__fmul_rn, __fadd_rn, ...): nvcc would
// otherwise contract a*b+c into one FMA, which rounds differently from the CPU loop.
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "kernels/cuda/device/reduce.cuh"
#include "kernels/cuda/device_api.cuh"
#include "kernels/cuda/launch_shapes.hpp"
#include "kernels/cuda/optimizer.hpp"  // the float scalars

// The launch shapes of these kernels (optimizer.cu launches with them, the SIMT tests too); the
// shared ones (Launch, elementwise, kWarp) are in launch_shapes.hpp.
namespace codistill::kernels::cuda::shapes {

constexpr std::int64_t kOptimizerChunk = 4096;  // elements per block: 16 per thread
constexpr int kOptimizerThreads = 256;

constexpr std::int64_t kSumSquaresChunk = 16384;  // elements per block of sum_squares_kernel
constexpr int kSumSquaresThreads = 256;

// One block per chunk; its partial sum goes to partials[block] (the host adds them in order).
inline Launch sum_squares(std::int64_t n) {
  const std::int64_t blocks = (n + kSumSquaresChunk - 1) / kSumSquaresChunk;
  if (blocks > 0x7fffffff) throw std::invalid_argument("sum_squares (cuda): too many elements for one launch");
  return {{static_cast<unsigned>(blocks)}, {kSumSquaresThreads}, (kSumSquaresThreads / kWarp) * sizeof(double)};
}

inline Launch optimizer(std::int64_t chunks) {
  if (chunks > 0x7fffffff)
    throw std::invalid_argument("optimizer step (cuda): too many parameters for one launch");
  return {{static_cast<unsigned>(chunks)}, {kOptimizerThreads}, 0};
}

}  // namespace codistill::kernels::cuda::shapes

namespace codistill::kernels::cuda::device {
inline namespace CODISTILL_DEVICE_ABI {

struct DevSlice {
  float* value;
  const float* grad;
  float* slot0;
  float* slot1;
  std::int64_t n;
  std::int64_t first_chunk;
  int vec4;  // every pointer 16-byte aligned: float4 loads and stores
  int pad;
};

// The host caches uploaded tables by content.
inline bool operator==(const DevSlice& a, const DevSlice& b) {
  return std::memcmp(&a, &b, sizeof(DevSlice)) == 0;
}

struct SgdOp {
  cuda::SgdScalars s;
  // g *= grad_scale, then  p -= lr * (g + wd * p)   or, with momentum,
  // d = g + wd * p;  b = mu * b + d;  p -= lr * (nesterov ? d + mu * b : b)
  __device__ __forceinline__ void operator()(float& p, float g, float& b, float&) const {
    g = __fmul_rn(g, s.grad_scale);
    const float d = __fadd_rn(g, __fmul_rn(s.weight_decay, p));
    if (s.momentum == 0.0f) {
      p = __fsub_rn(p, __fmul_rn(s.lr, d));
      return;
    }
    const float nb = __fadd_rn(__fmul_rn(s.momentum, b), d);
    b = nb;
    const float step = s.nesterov ? __fadd_rn(d, __fmul_rn(s.momentum, nb)) : nb;
    p = __fsub_rn(p, __fmul_rn(s.lr, step));
  }
};

struct AdamWOp {
  cuda::AdamWScalars s;
  // g *= grad_scale;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g;
  // p = p decay - step_size m / (sqrt(v) inv_sqrt_bc2 + eps)
  __device__ __forceinline__ void operator()(float& p, float g, float& m, float& v) const {
    g = __fmul_rn(g, s.grad_scale);
    const float mi = __fadd_rn(__fmul_rn(s.beta1, m), __fmul_rn(__fsub_rn(1.0f, s.beta1), g));
    const float vi = __fadd_rn(__fmul_rn(s.beta2, v),
                               __fmul_rn(__fmul_rn(__fsub_rn(1.0f, s.beta2), g), g));
    m = mi;
    v = vi;
    const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), s.inv_sqrt_bc2), s.eps);
    p = __fsub_rn(__fmul_rn(p, s.decay), __fdiv_rn(__fmul_rn(s.step_size, mi), denom));
  }
};

// Slots a step does not use are null; they are read and written through a dummy.
template <class Op>
__device__ __forceinline__ void update_one(const Op& op, const DevSlice& sl, std::int64_t i) {
  float p = sl.value[i];
  float s0 = sl.slot0 ? sl.slot0[i] : 0.0f, s1 = sl.slot1 ? sl.slot1[i] : 0.0f;
  op(p, sl.grad[i], s0, s1);
  sl.value[i] = p;
  if (sl.slot0) sl.slot0[i] = s0;
  if (sl.slot1) sl.slot1[i] = s1;
}

// The block's chunk of slice sl (whose chunks start at sl.first_chunk).
template <class Op>
__device__ __forceinline__ void update_chunk(const Op& op, const DevSlice& sl,
                                             std::int64_t chunk) {
  constexpr std::int64_t kChunk = shapes::kOptimizerChunk;
  constexpr int kThreads = shapes::kOptimizerThreads;
  const std::int64_t begin = (chunk - sl.first_chunk) * kChunk;
  const std::int64_t end = begin + kChunk < sl.n ? begin + kChunk : sl.n;
  std::int64_t i = begin + threadIdx.x;
  if (sl.vec4) {
    // begin is a multiple of 4 (kChunk is), so with aligned bases every float4 is aligned.
    const std::int64_t vec_end = begin + (end - begin) / 4 * 4;
    for (std::int64_t j = begin + 4 * threadIdx.x; j < vec_end; j += 4 * kThreads) {
      float4 p = *reinterpret_cast<const float4*>(sl.value + j);
      const float4 g = *reinterpret_cast<const float4*>(sl.grad + j);
      float4 a = sl.slot0 ? *reinterpret_cast<const float4*>(sl.slot0 + j) : float4{};
      float4 b = sl.slot1 ? *reinterpret_cast<const float4*>(sl.slot1 + j) : float4{};
      op(p.x, g.x, a.x, b.x);
      op(p.y, g.y, a.y, b.y);
      op(p.z, g.z, a.z, b.z);
      op(p.w, g.w, a.w, b.w);
      *reinterpret_cast<float4*>(sl.value + j) = p;
      if (sl.slot0) *reinterpret_cast<float4*>(sl.slot0 + j) = a;
      if (sl.slot1) *reinterpret_cast<float4*>(sl.slot1 + j) = b;
    }
    i = vec_end + threadIdx.x;  // the tail of the slice's last chunk
  }
  for (; i < end; i += kThreads) update_one(op, sl, i);
}

template <class Op>
__global__ void __launch_bounds__(shapes::kOptimizerThreads)
    step_kernel(const DevSlice* __restrict__ table, int slices, Op op) {
  const std::int64_t chunk = blockIdx.x;
  int lo = 0, hi = slices - 1;  // the last slice whose first chunk is <= this one
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table[mid].first_chunk <= chunk) lo = mid;
    else hi = mid - 1;
  }
  const DevSlice sl = table[lo];
  update_chunk(op, sl, chunk);
}

// The gradients' sum of squares for clipping (optimizer.clip_grad_norm): block b sums chunk b
// of x in double, in a fixed order (each thread's stride, then block_sum), into partials[b].
__global__ void __launch_bounds__(shapes::kSumSquaresThreads)
    sum_squares_kernel(const float* __restrict__ x, std::int64_t n, double* __restrict__ partials) {
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.x) * shapes::kSumSquaresChunk;
  const std::int64_t end = begin + shapes::kSumSquaresChunk < n ? begin + shapes::kSumSquaresChunk : n;
  double s = 0;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = x[i];
    s += v * v;
  }
  s = block_sum(s, dynamic_smem<double>());
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// One slice (a flat parameter arena: the backend's case) comes by value: no table.
template <class Op>
__global__ void __launch_bounds__(shapes::kOptimizerThreads) step_one_kernel(const DevSlice sl,
                                                                             Op op) {
  update_chunk(op, sl, blockIdx.x);
}

}  // namespace CODISTILL_DEVICE_ABI
}  // namespace codistill::kernels::cuda::device
