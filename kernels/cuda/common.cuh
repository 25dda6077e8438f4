#pragma once
// Internals shared by the .cu files of the CUDA backend (never included outside
// kernels/cuda/): stream and device plumbing, launch checks, per-device properties, the
// queue's scratch workspace and the deterministic warp/block sums.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/context.hpp"

// A kernel launch reports configuration errors only through cudaGetLastError.
#define CODISTILL_CUDA_LAUNCH_CHECK() CODISTILL_CUDA_CHECK(cudaGetLastError())

namespace codistill::kernels::cuda::detail {

inline cudaStream_t stream_of(const Context& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

// Every entry point selects its device first: the caller's thread may have used another.
inline void use_device(const Context& ctx) { CODISTILL_CUDA_CHECK(cudaSetDevice(ctx.device)); }

inline void check_nonnegative(const char* op, std::int64_t a, std::int64_t b = 0,
                              std::int64_t c = 0) {
  if (a < 0 || b < 0 || c < 0)
    throw std::invalid_argument(std::string(op) + " (cuda): negative size (" + std::to_string(a) +
                                ", " + std::to_string(b) + ", " + std::to_string(c) + ")");
}

// Grid for a grid-stride loop over n items, capped so that huge n does not launch more
// blocks than the device can keep busy (each thread then walks several items).
inline unsigned grid_for(std::int64_t n, int threads, std::int64_t max_blocks = 65536) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > max_blocks ? max_blocks : blocks));
}

// Properties the launch heuristics need, read once per device (context.cu).
struct DeviceInfo {
  int sms = 1;                // multiprocessors
  int l2_bytes = 0;           // L2 cache size
  int major = 0;              // compute capability
};
const DeviceInfo& device_info(int device);

// Scratch device memory for one op: the buffer of the queue behind ctx (ctx.resources,
// resources.cuh), from the caching allocator, grown on demand and kept. Work queued on one
// stream runs in order, so the ops of that stream share it without synchronizing; when it
// must grow, the stream is synchronized before the old buffer goes back to the cache. Valid
// until the next call for the same queue. Throws std::logic_error when ctx has no resources.
void* stream_workspace(const Context& ctx, std::size_t bytes);

constexpr int kWarp = 32;

// Butterfly sum: every lane ends with the same bits (the xor pattern is fixed and IEEE
// addition is commutative), so the result is reproducible run to run.
template <class V>
__device__ __forceinline__ V warp_sum(V v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide sum in a fixed order; every thread gets the result. smem: one slot per warp.
// Contains __syncthreads: every thread of the block must call it.
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

}  // namespace codistill::kernels::cuda::detail
