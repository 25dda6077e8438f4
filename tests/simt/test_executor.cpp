// The SIMT executor itself: thread coordinates, the barrier and the warp collectives, the
// seeded schedule (a missing barrier must show), launch checks and kernel faults.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <vector>

#include "simt/cuda_shim.hpp"
#include "simt/executor.hpp"

namespace {

__global__ void write_coords(unsigned* out) {
  const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned per_block = blockDim.x * blockDim.y * blockDim.z;
  out[b * per_block + t] = b * 1000000u + t;
}

// Thread 0 publishes a value through shared memory; every other thread reads it.
template <bool kBarrier>
__global__ void broadcast(const float* in, float* out) {
  __shared__ float slot[1];
  if (threadIdx.x == 0) slot[0] = in[blockIdx.x];
  if (kBarrier) __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = slot[0];
  if (kBarrier) __syncthreads();  // slot is rewritten by the next block on this OS thread
}

__global__ void block_reverse(const int* in, int* out) {
  int* s = static_cast<int*>(simt::dynamic_shared());
  s[threadIdx.x] = in[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
}

__global__ void divergent_barrier(int* out) {
  if (threadIdx.x < 16) __syncthreads();
  else __syncwarp();  // waits for lanes 0-15, which wait at the block barrier
  out[threadIdx.x] = 1;
}

__global__ void early_exit_barrier(int* out) {
  if (threadIdx.x % 2) return;  // exited threads do not hold a barrier back (Volta on)
  __syncthreads();
  out[threadIdx.x] = 7;
}

__global__ void trap_in_thread_5() {
  if (threadIdx.x == 5 && blockIdx.x == 1) __trap();
  __syncthreads();
}

__global__ void misaligned_load(const float* p, float* out) { out[0] = __ldcs(reinterpret_cast<const float4*>(p)).x; }

__global__ void atomics(unsigned long long* counter, float* fsum, int* mn) {
  atomicAdd(counter, 1ull);
  atomicAdd(fsum, 0.5f);
  atomicMin(mn, static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x) - 10);
}

}  // namespace

TEST_CASE("every thread of a 3-d grid of 3-d blocks runs once with its coordinates", "[simt]") {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  const unsigned blocks = 12, per = 24;
  simt::DeviceBuffer<unsigned> out(blocks * per);
  simt::launch(write_coords, {grid, block, 0, false, 7}, out.data());
  const auto v = out.download();
  for (unsigned b = 0; b < blocks; ++b)
    for (unsigned t = 0; t < per; ++t) REQUIRE(v[b * per + t] == b * 1000000u + t);
}

TEST_CASE("the schedule is random: a missing barrier shows, a present one holds", "[simt]") {
  const unsigned blocks = 4, threads = 64;
  std::vector<float> in = {1, 2, 3, 4};
  simt::DeviceBuffer<float> din(in);
  int broken_seeds = 0;
  for (std::uint64_t seed = 0; seed < 16; ++seed) {
    simt::DeviceBuffer<float> good(blocks * threads), bad(blocks * threads);
    simt::launch(broadcast<true>, {blocks, threads, 0, false, seed}, din.data(), good.data());
    simt::launch(broadcast<false>, {blocks, threads, 0, false, seed}, din.data(), bad.data());
    const auto g = good.download(), b = bad.download();
    for (unsigned i = 0; i < blocks * threads; ++i) REQUIRE(g[i] == in[i / threads]);
    bool wrong = false;
    for (unsigned i = 0; i < blocks * threads; ++i) wrong = wrong || !(b[i] == in[i / threads]);
    broken_seeds += wrong;
  }
  // Without the barrier a reader runs before thread 0 for (nearly) every seed.
  CHECK(broken_seeds >= 12);
}

TEST_CASE("dynamic shared memory has the launch's size and is per block", "[simt]") {
  std::vector<int> in(256);
  for (int i = 0; i < 256; ++i) in[i] = i * 3;
  simt::DeviceBuffer<int> din(in), dout(256);
  simt::launch(block_reverse, {1, 256, 256 * sizeof(int), false, 1}, din.data(), dout.data());
  const auto v = dout.download();
  for (int i = 0; i < 256; ++i) REQUIRE(v[i] == in[255 - i]);
}

TEST_CASE("a barrier in divergent code is a deadlock, reported as a fault", "[simt]") {
  simt::DeviceBuffer<int> out(32);
  REQUIRE_THROWS_WITH(simt::launch(divergent_barrier, {1, 32, 0, false, 3}, out.data()),
                      Catch::Contains("deadlock"));
}

TEST_CASE("exited threads do not hold back a barrier", "[simt]") {
  simt::DeviceBuffer<int> out(64);
  simt::launch(early_exit_barrier, {1, 64, 0, false, 3}, out.data());
  const auto v = out.download();
  for (int i = 0; i < 64; i += 2) REQUIRE(v[i] == 7);
  for (int i = 1; i < 64; i += 2) REQUIRE(v[i] == -1);  // untouched poison
}

TEST_CASE("__trap and misaligned accesses are kernel faults naming the thread", "[simt]") {
  REQUIRE_THROWS_WITH(simt::launch(trap_in_thread_5, {3, 64, 0, false, 0}),
                      Catch::Contains("block (1,0,0) thread (5,0,0)") &&
                          Catch::Contains("__trap"));
  simt::DeviceBuffer<float> in(8, 4);  // 4 bytes past a 64-byte boundary
  simt::DeviceBuffer<float> out(1);
  REQUIRE_THROWS_WITH(simt::launch(misaligned_load, {1, 1, 0, false, 0}, in.data(), out.data()),
                      Catch::Contains("misaligned 16-byte access"));
  simt::DeviceBuffer<float> aligned(8);
  simt::launch(misaligned_load, {1, 1, 0, false, 0}, aligned.data(), out.data());
}

TEST_CASE("launches a GPU would refuse are refused", "[simt]") {
  const auto refused = [](simt::LaunchConfig c, const char* what) {
    REQUIRE_THROWS_WITH(simt::check_launch(c), Catch::Contains(what));
  };
  refused({1, 1025}, "block.x = 1025 exceeds 1024");
  refused({1, dim3(32, 33)}, "1056 threads per block exceed 1024");
  refused({1, dim3(32, 32, 2)}, "2048 threads per block exceed 1024");
  refused({1, dim3(1, 1, 65)}, "block.z = 65 exceeds 64");
  refused({dim3(1, 65536), 32}, "grid.y = 65536 exceeds 65535");
  refused({0, 32}, "grid.x is 0");
  refused({1, 32, 48 * 1024 + 1}, "48 KiB without");
  refused({1, 32, 227 * 1024 + 1, true}, "opt-in maximum");
  simt::check_launch({1, 32, 100 * 1024, true});
  simt::check_launch({dim3(2147483647u), 1024, 48 * 1024});
}

TEST_CASE("atomics across blocks and threads", "[simt]") {
  simt::DeviceBuffer<unsigned long long> counter(std::vector<unsigned long long>{0});
  simt::DeviceBuffer<float> fsum(std::vector<float>{0});
  simt::DeviceBuffer<int> mn(std::vector<int>{1000});
  simt::launch(atomics, {5, 96, 0, false, 9}, counter.data(), fsum.data(), mn.data());
  REQUIRE(counter.download()[0] == 480);
  REQUIRE(fsum.download()[0] == 240.0f);
  REQUIRE(mn.download()[0] == -10);
}
