#pragma once
// Host-side internals shared by the .cu files of the CUDA backend (never included outside
// kernels/cuda/): stream and device plumbing, launch checks, per-device properties and the
// queue's scratch workspace. Device code is in kernels/cuda/device/.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/launch_shapes.hpp"

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

// Grid for a grid-stride loop over n items (launch_shapes.hpp).
using shapes::grid_for;

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

}  // namespace codistill::kernels::cuda::detail
