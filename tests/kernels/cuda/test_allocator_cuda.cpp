// The caching allocator (reuse, rounding, splitting, statistics, empty_cache), pinned
// memory with asynchronous copies on a stream, events, and Tensor's use of the cache.
// Without a CUDA device every case prints "skipped: no CUDA device" (CTest: skipped).
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cuda/allocator.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/tensor.hpp"

namespace cuda = codistill::kernels::cuda;
using namespace codistill::test;

TEST_CASE("cuda allocator: a freed block is reused from the cache", "[cuda][allocator]") {
  if (no_cuda_device()) return;
  cuda::empty_cache(0);  // no free block left but what this case frees
  const auto before = cuda::allocator_stats(0);
  void* a = cuda::cached_malloc(1000, 0);
  const auto held = cuda::allocator_stats(0);
  CHECK(held.allocated_bytes - before.allocated_bytes == 1024);  // rounded up to 512 bytes
  CHECK(held.peak_allocated_bytes >= held.allocated_bytes);
  cuda::cached_free(a, 0);
  const auto freed = cuda::allocator_stats(0);
  CHECK(freed.allocated_bytes == before.allocated_bytes);
  CHECK(freed.cached_bytes >= 1024);

  void* b = cuda::cached_malloc(1000, 0);
  const auto again = cuda::allocator_stats(0);
  CHECK(b == a);  // best fit: the block just freed
  CHECK(again.cache_hits == freed.cache_hits + 1);
  CHECK(again.device_mallocs == freed.device_mallocs);
  cuda::cached_free(b, 0);
}

TEST_CASE("cuda allocator: small blocks share a segment, large blocks are split",
          "[cuda][allocator]") {
  if (no_cuda_device()) return;
  cuda::empty_cache(0);
  const auto s0 = cuda::allocator_stats(0);
  std::vector<void*> small;
  for (int i = 0; i < 8; ++i) small.push_back(cuda::cached_malloc(4096 + 7 * i, 0));
  const auto s1 = cuda::allocator_stats(0);
  CHECK(s1.device_mallocs - s0.device_mallocs <= 1);  // all from one 2 MiB segment
  for (std::size_t i = 1; i < small.size(); ++i) CHECK(small[i] != small[i - 1]);

  void* big = cuda::cached_malloc(5u << 20, 0);
  cuda::cached_free(big, 0);
  const auto s2 = cuda::allocator_stats(0);
  void* part = cuda::cached_malloc(3u << 20, 0);  // carved out of the freed 6 MiB segment
  void* rest = cuda::cached_malloc(2u << 20, 0);  // ... and so is the remainder
  const auto s3 = cuda::allocator_stats(0);
  CHECK(s3.device_mallocs == s2.device_mallocs);
  CHECK(s3.cache_hits == s2.cache_hits + 2);
  CHECK(static_cast<char*>(rest) == static_cast<char*>(part) + (3u << 20));
  cuda::cached_free(part, 0);
  cuda::cached_free(rest, 0);  // merges back into one free segment
  for (void* p : small) cuda::cached_free(p, 0);

  const auto s4 = cuda::allocator_stats(0);
  CHECK(s4.allocated_bytes == s0.allocated_bytes);
  cuda::empty_cache(0);
  CHECK(cuda::allocator_stats(0).cached_bytes < s4.cached_bytes);
  CHECK(cuda::allocator_stats(0).cached_bytes == 0);  // every segment was whole and free
}

TEST_CASE("cuda allocator: memory holds data, pinned copies on a stream round-trip",
          "[cuda][allocator]") {
  if (no_cuda_device()) return;
  const std::size_t n = 300001;  // not a multiple of anything
  cuda::Stream stream(0);
  const auto ctx = stream.context();
  auto* host = static_cast<float*>(cuda::pinned_malloc(n * sizeof(float)));
  auto* back = static_cast<float*>(cuda::pinned_malloc(n * sizeof(float)));
  std::iota(host, host + n, -5.0f);
  std::fill(back, back + n, -1.0f);
  void* d1 = cuda::cached_malloc(n * sizeof(float), 0);
  void* d2 = cuda::cached_malloc(n * sizeof(float), 0);
  cuda::memcpy_async(d1, host, n * sizeof(float), cuda::CopyKind::host_to_device, ctx);
  cuda::memcpy_async(d2, d1, n * sizeof(float), cuda::CopyKind::device_to_device, ctx);
  cuda::memcpy_async(back, d2, n * sizeof(float), cuda::CopyKind::device_to_host, ctx);
  cuda::Event done(0);
  done.record(stream.handle());
  done.synchronize();
  CHECK(done.ready());
  CHECK(std::equal(host, host + n, back));
  cuda::cached_free(d1, 0);
  cuda::cached_free(d2, 0);
  cuda::pinned_free(host);
  cuda::pinned_free(back);
}

TEST_CASE("cuda events order two streams", "[cuda][allocator]") {
  if (no_cuda_device()) return;
  cuda::Stream producer(0), consumer(0);
  const std::size_t n = 1 << 20;
  std::vector<float> values(n);
  std::iota(values.begin(), values.end(), 1.0f);
  auto* pinned = static_cast<float*>(cuda::pinned_malloc(n * sizeof(float)));
  std::copy(values.begin(), values.end(), pinned);
  void* a = cuda::cached_malloc(n * sizeof(float), 0);
  void* b = cuda::cached_malloc(n * sizeof(float), 0);
  cuda::memcpy_async(a, pinned, n * sizeof(float), cuda::CopyKind::host_to_device,
                     producer.context());
  cuda::Event ready(0);
  ready.record(producer.handle());
  ready.wait(consumer.handle());  // the consumer's copy starts after the upload
  cuda::memcpy_async(b, a, n * sizeof(float), cuda::CopyKind::device_to_device,
                     consumer.context());
  consumer.synchronize();  // so the producer's upload (waited for) is done reading pinned
  std::fill(pinned, pinned + n, 0.0f);
  cuda::memcpy_async(pinned, b, n * sizeof(float), cuda::CopyKind::device_to_host,
                     consumer.context());
  cuda::stream_synchronize(consumer.context());
  CHECK(std::equal(values.begin(), values.end(), pinned));
  cuda::cached_free(a, 0);
  cuda::cached_free(b, 0);
  cuda::pinned_free(pinned);
}

TEST_CASE("cuda tensors allocate through the cache", "[cuda][allocator]") {
  if (no_cuda_device()) return;
  using codistill::kernels::Device;
  using codistill::kernels::DType;
  using codistill::kernels::Tensor;
  const auto before = cuda::allocator_stats(0);
  {
    Tensor t = Tensor::empty({123, 45}, DType::f32, Device::cuda(0));
    CHECK(cuda::allocator_stats(0).allocated_bytes - before.allocated_bytes >= 123 * 45 * 4);
  }
  const auto freed = cuda::allocator_stats(0);
  CHECK(freed.allocated_bytes == before.allocated_bytes);
  Tensor again = Tensor::empty({123, 45}, DType::f32, Device::cuda(0));
  CHECK(cuda::allocator_stats(0).cache_hits == freed.cache_hits + 1);
}
