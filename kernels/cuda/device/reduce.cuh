#pragma once
// Device-side building blocks shared by the kernels: the warp size, dynamic shared memory
// and the deterministic warp and block sums.
#include "kernels/cuda/device_api.cuh"

namespace codistill::kernels::cuda::device {
inline namespace CODISTILL_DEVICE_ABI {

constexpr int kWarp = 32;

// The launch's dynamic shared memory (16-byte aligned). Not `extern __shared__` in the
// kernels themselves: the SIMT executor provides it as a per-block heap buffer instead.
template <class T>
__device__ __forceinline__ T* dynamic_smem() {
#if defined(__CUDACC__)
  extern __shared__ __align__(16) unsigned char codistill_dynamic_smem[];
  return reinterpret_cast<T*>(codistill_dynamic_smem);
#else
  return static_cast<T*>(::simt::dynamic_shared());
#endif
}

// Butterfly sum: every lane ends with the same bits (the xor pattern is fixed and IEEE
// addition is commutative), so the result is reproducible run to run.
template <class V>
__device__ __forceinline__ V warp_sum(V v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide sum in a fixed order; every thread gets the result. smem: one slot per warp.
// Contains __syncthreads: every thread of the block must call it. blockDim.x must be a
// multiple of the warp size (the full-warp shuffles name all 32 lanes).
template <class V>
__device__ V block_sum(V v, V* smem) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = (blockDim.x + kWarp - 1) / kWarp;
  v = warp_sum(v);
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = lane < warps ? smem[lane] : V(0);
  v = warp_sum(v);
  __syncthreads();  // smem may be reused right after
  return v;
}

}  // namespace CODISTILL_DEVICE_ABI
}  // namespace codistill::kernels::cuda::device
