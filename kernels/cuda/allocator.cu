// The caching device allocator, pinned host memory and asynchronous copies (allocator.hpp).
//
// Per device, two pools of free blocks ordered by (size, address), so a best fit is one
// std::set::lower_bound:
//   small: requests up to 1 MiB, carved out of 2 MiB driver segments;
//   large: bigger requests, driver segments rounded up to 2 MiB (cudaMalloc's own
//          granularity for large sizes); a best-fit block is split when what is left over
//          is itself a large block (> 1 MiB), else handed out whole.
// Blocks of one segment are linked to their neighbours so that a freed block merges with
// free neighbours again, and empty_cache returns whole free segments to the driver.
// Every operation holds the device's mutex: cheap next to what the caller does with the
// memory, and cudaMalloc (rare, after warm-up) is slow anyway.
//
// Stream-safe reuse: a freed block waits in PendingFrees (pending_frees.hpp) until an event
// recorded at the free on every live stream of the device (the queues register theirs) has
// completed; only then does it return to a pool. So a block freed while a kernel on any
// queue may still use it is never handed out under that kernel.
//
// Pinned host memory is cached too (exact sizes, rounded to 4 KiB): cudaMallocHost and
// cudaFreeHost are slow and synchronize the device, and teacher reloads stage the same sizes
// again and again. The caller frees pinned memory only once its copies are done.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "kernels/cuda/allocator.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/pending_frees.hpp"

namespace codistill::kernels::cuda {
namespace {

constexpr std::size_t kRound = 512;
constexpr std::size_t kSmallMax = std::size_t{1} << 20;
constexpr std::size_t kSmallSegment = std::size_t{2} << 20;
constexpr std::size_t kLargeRound = std::size_t{2} << 20;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

struct Block {
  char* ptr = nullptr;
  std::size_t size = 0;
  bool small = false;
  bool free = false;
  Block* prev = nullptr;  // neighbours inside the same driver segment
  Block* next = nullptr;
};

struct BySize {
  bool operator()(const Block* a, const Block* b) const {
    if (a->size != b->size) return a->size < b->size;
    return std::less<char*>{}(a->ptr, b->ptr);
  }
};
using Pool = std::set<Block*, BySize>;

class DeviceCache {
 public:
  explicit DeviceCache(int device) : device_(device) {}

  void* allocate(std::size_t bytes) {
    const std::size_t size = bytes <= kRound ? kRound : round_up(bytes, kRound);
    const bool small = size <= kSmallMax;
    std::lock_guard<std::mutex> lock(mutex_);
    collect_pending(false);
    Pool& pool = small ? small_ : large_;
    Block key;
    key.size = size;  // ptr null sorts first among equal sizes: lower_bound is the best fit
    Block* b = nullptr;
    auto it = pool.lower_bound(&key);
    if (it == pool.end() && !pending_.empty()) {  // freed blocks still in use: wait for them
      collect_pending(true);
      it = pool.lower_bound(&key);
    }
    if (it != pool.end()) {
      b = *it;
      pool.erase(it);
      stats_.cached_bytes -= b->size;
      ++stats_.cache_hits;
    } else {
      b = new_segment(size, small);
    }
    const std::size_t rest = b->size - size;
    if (small ? rest >= kRound : rest > kSmallMax) {
      auto* r = new Block{b->ptr + size, rest, small, true, b, b->next};
      if (b->next) b->next->prev = r;
      b->next = r;
      b->size = size;
      pool.insert(r);
      stats_.cached_bytes += rest;
    }
    b->free = false;
    live_.emplace(b->ptr, b);
    stats_.allocated_bytes += b->size;
    if (stats_.allocated_bytes > stats_.peak_allocated_bytes)
      stats_.peak_allocated_bytes = stats_.allocated_bytes;
    return b->ptr;
  }

  // False for a pointer this cache did not hand out (nothing is changed then).
  bool release(void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return false;
    Block* b = it->second;
    live_.erase(it);
    stats_.allocated_bytes -= b->size;
    std::vector<cudaEvent_t> markers;
    for (cudaStream_t s : streams_) {
      cudaEvent_t e = event();
      if (!e || cudaEventRecord(e, s) != cudaSuccess) {
        // No marker, no safe reuse later: wait for that stream now instead.
        cudaGetLastError();
        if (e) events_.push_back(e);
        cudaStreamSynchronize(s);
        continue;
      }
      markers.push_back(e);
    }
    if (markers.empty()) to_pool(b);
    else pending_.add(b, std::move(markers));
    return true;
  }

  void add_stream(cudaStream_t s) {
    std::lock_guard<std::mutex> lock(mutex_);
    streams_.push_back(s);
  }
  void remove_stream(cudaStream_t s) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase(streams_, s);
  }

 private:
  // A timing-free event from the recycled ones (null if none can be made).
  cudaEvent_t event() {
    if (!events_.empty()) {
      cudaEvent_t e = events_.back();
      events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    cudaSetDevice(device_);
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return e;
  }

  // Moves the pending blocks whose events completed (all of them with wait) to the pools.
  // Caller holds the mutex.
  void collect_pending(bool wait) {
    if (pending_.empty()) return;
    auto done = [&](cudaEvent_t e) {
      const cudaError_t st = wait ? cudaEventSynchronize(e) : cudaEventQuery(e);
      if (st == cudaErrorNotReady) {
        cudaGetLastError();  // an answer, not an error
        return false;
      }
      return true;  // completed (or failed: nothing will run on it any more)
    };
    for (void* b : pending_.collect(done, [&](cudaEvent_t e) { events_.push_back(e); }))
      to_pool(static_cast<Block*>(b));
  }

  // A freed block into its pool, merged with free neighbours. Caller holds the mutex.
  void to_pool(Block* b) {
    b->free = true;
    Pool& pool = b->small ? small_ : large_;
    if (Block* p = b->prev; p && p->free) {  // merge into the free block before
      pool.erase(p);  // erase before the size (its sort key) changes
      stats_.cached_bytes -= p->size;
      p->size += b->size;
      p->next = b->next;
      if (b->next) b->next->prev = p;
      delete b;
      b = p;
    }
    if (Block* n = b->next; n && n->free) {  // absorb the free block after
      pool.erase(n);
      stats_.cached_bytes -= n->size;
      b->size += n->size;
      b->next = n->next;
      if (n->next) n->next->prev = b;
      delete n;
    }
    pool.insert(b);
    stats_.cached_bytes += b->size;
  }

 public:
  AllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void empty() {
    std::lock_guard<std::mutex> lock(mutex_);
    collect_pending(true);
    release_free_segments();
  }

 private:
  // A fresh driver segment holding at least size bytes, as one block (not in any pool).
  Block* new_segment(std::size_t size, bool small) {
    const std::size_t bytes = small ? kSmallSegment : round_up(size, kLargeRound);
    CODISTILL_CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      // Cached segments may be what fills the device: give them back and try once more.
      cudaGetLastError();
      collect_pending(true);
      release_free_segments();
      err = cudaMalloc(&p, bytes);
    }
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw std::runtime_error(
          std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": cudaMalloc of " +
          std::to_string(bytes) + " bytes on device " + std::to_string(device_) +
          " failed: " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err) + " (" +
          std::to_string(stats_.allocated_bytes) + " bytes in use, " +
          std::to_string(stats_.cached_bytes) + " cached)");
    }
    ++stats_.device_mallocs;
    return new Block{static_cast<char*>(p), bytes, small, false, nullptr, nullptr};
  }

  // Frees every segment that is one whole free block. Caller holds the mutex.
  void release_free_segments() {
    cudaSetDevice(device_);
    for (Pool* pool : {&small_, &large_})
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it;
        if (b->prev || b->next) {
          ++it;
          continue;
        }
        cudaFree(b->ptr);  // synchronizes the device: nothing still running can use it
        stats_.cached_bytes -= b->size;
        it = pool->erase(it);
        delete b;
      }
  }

  std::mutex mutex_;
  int device_;
  Pool small_, large_;
  std::unordered_map<void*, Block*> live_;
  AllocatorStats stats_;
  std::vector<cudaStream_t> streams_;  // the live queues' streams of this device
  PendingFrees<cudaEvent_t> pending_;
  std::vector<cudaEvent_t> events_;    // recycled markers
};

DeviceCache& cache_for(int device) {
  // Leaked on purpose: tensors in static storage are freed during exit, after any static
  // map here would have been destroyed.
  static std::mutex mutex;
  static auto* caches = new std::map<int, DeviceCache*>();
  std::lock_guard<std::mutex> lock(mutex);
  auto& c = (*caches)[device];
  if (!c) c = new DeviceCache(device);
  return *c;
}

}  // namespace

void* cached_malloc(std::size_t bytes, int device) { return cache_for(device).allocate(bytes); }

void cached_free(void* ptr, int device) noexcept {
  if (!ptr) return;
  try {
    if (!cache_for(device).release(ptr))
      std::fprintf(stderr,
                   "codistill: cached_free: %p was not allocated by the cache of device %d\n", ptr,
                   device);
  } catch (...) {  // only std::bad_alloc from the registry is possible; nothing to do
  }
}

AllocatorStats allocator_stats(int device) { return cache_for(device).stats(); }

void empty_cache(int device) { cache_for(device).empty(); }

void register_stream(int device, void* stream) {
  cache_for(device).add_stream(static_cast<cudaStream_t>(stream));
}
void unregister_stream(int device, void* stream) noexcept {
  try {
    cache_for(device).remove_stream(static_cast<cudaStream_t>(stream));
  } catch (...) {
  }
}

namespace {

// Pinned blocks by rounded size; live ones by pointer (to know their size at the free).
struct PinnedCache {
  static constexpr std::size_t kKeepBytes = std::size_t{1} << 30;  // cached beyond: freed
  std::mutex mutex;
  std::multimap<std::size_t, void*> free;
  std::unordered_map<void*, std::size_t> live;
  std::size_t cached = 0;
};
PinnedCache& pinned_cache() {
  static auto* c = new PinnedCache();  // leaked on purpose, as the device caches
  return *c;
}

}  // namespace

void* pinned_malloc(std::size_t bytes) {
  const std::size_t size = round_up(bytes == 0 ? 1 : bytes, 4096);
  PinnedCache& c = pinned_cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (auto it = c.free.find(size); it != c.free.end()) {
      void* p = it->second;
      c.free.erase(it);
      c.cached -= size;
      c.live.emplace(p, size);
      return p;
    }
  }
  void* p = nullptr;
  CODISTILL_CUDA_CHECK(cudaMallocHost(&p, size));
  std::lock_guard<std::mutex> lock(c.mutex);
  c.live.emplace(p, size);
  return p;
}

void pinned_free(void* ptr) noexcept {
  if (!ptr) return;
  PinnedCache& c = pinned_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.live.find(ptr);
  if (it == c.live.end()) {
    std::fprintf(stderr, "codistill: pinned_free: %p was not allocated by pinned_malloc\n", ptr);
    return;
  }
  const std::size_t size = it->second;
  c.live.erase(it);
  if (c.cached + size > PinnedCache::kKeepBytes) {
    cudaFreeHost(ptr);
    return;
  }
  c.free.emplace(size, ptr);
  c.cached += size;
}

void memcpy_async(void* dst, const void* src, std::size_t bytes, CopyKind kind,
                  const Context& ctx) {
  if (bytes == 0) return;
  cudaMemcpyKind k = cudaMemcpyDeviceToDevice;
  switch (kind) {
    case CopyKind::host_to_device: k = cudaMemcpyHostToDevice; break;
    case CopyKind::device_to_host: k = cudaMemcpyDeviceToHost; break;
    case CopyKind::device_to_device: k = cudaMemcpyDeviceToDevice; break;
  }
  detail::use_device(ctx);
  CODISTILL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, detail::stream_of(ctx)));
}

}  // namespace codistill::kernels::cuda
