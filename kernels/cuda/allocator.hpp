#pragma once
// Device memory through a caching allocator, and pinned host memory for staging.
//
// cudaMalloc/cudaFree synchronize the device and cost tens of microseconds; the training
// loop frees and re-allocates the same sizes every step (per-step temporaries, teacher
// swaps), so freed blocks are kept per device in size-binned free lists and reused
// (sizes rounded up to 512 bytes; large blocks split). Reuse is safe across streams: a
// freed block returns to the pools only once an event recorded at the free on every
// registered stream of the device has completed (pending_frees.hpp), so freeing a tensor
// that kernels on some queue may still read needs no synchronization by the caller. The
// queues register their streams (register_stream) for their lifetime.
#include <cstddef>

#include "kernels/cuda/context.hpp"

namespace codistill::kernels::cuda {

void* cached_malloc(std::size_t bytes, int device);
void cached_free(void* ptr, int device) noexcept;  // back to the cache, not to the driver

struct AllocatorStats {
  std::size_t allocated_bytes = 0;  // in live blocks handed out
  std::size_t cached_bytes = 0;     // held in free lists
  std::size_t peak_allocated_bytes = 0;
  std::size_t device_mallocs = 0;   // cudaMalloc calls so far
  std::size_t cache_hits = 0;       // allocations served from the cache
};
AllocatorStats allocator_stats(int device);
// Returns every cached (free) block of the device to the driver.
void empty_cache(int device);

// The streams whose queued work a freed block must wait for (the queues' streams).
void register_stream(int device, void* stream);
void unregister_stream(int device, void* stream) noexcept;

// Page-locked host memory (cudaMallocHost): asynchronous host<->device copies need it.
// Cached by size: freed blocks are reused, not given back (up to 1 GiB cached). Free only
// once the copies that use the block are done (the caller's ordering, as for any host
// buffer of an asynchronous copy).
void* pinned_malloc(std::size_t bytes);
void pinned_free(void* ptr) noexcept;

enum class CopyKind { host_to_device, device_to_host, device_to_device };
// cudaMemcpyAsync on ctx.stream; the host side must be pinned for the copy to be async.
void memcpy_async(void* dst, const void* src, std::size_t bytes, CopyKind kind, const Context& ctx);

}  // namespace codistill::kernels::cuda
