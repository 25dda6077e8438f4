// The block reductions the kernels share, run under the SIMT executor at sizes where each of
// their barriers matters, against sums that do not depend on the order (integers in
// doubles) or that follow the kernel's own fixed order bit for bit:
//   block_sum (reduce.cuh) twice in a row on the same shared slots, as batchnorm and
//     layernorm call it: with one warp neither barrier matters (each lane reads what it
//     wrote itself), with two or more the first keeps a warp from reading a slot before it
//     is written and the second one from overwriting a slot another warp has not read yet.
//   sum_rows_kernel (distill_loss.cuh) over more rows than half its block: with fewer, the
//     upper half of the tree adds zeros and a missing barrier changes nothing. Each launch
//     has new data, so a read of a slot before it is written sees another launch's value
//     (block-scope __shared__ arrays are not re-poisoned between launches).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/device/distill_loss.cuh"
#include "kernels/cuda/device/reduce.cuh"
#include "tests/kernels/cuda_simt/simt_support.hpp"

namespace {

using namespace codistill;
using namespace codistill::test::simt_kernels;
namespace dev = kernels::cuda::device;

// out[2 i], out[2 i + 1]: thread i's results of two block sums in a row (of a, then of b).
__global__ void two_block_sums(const double* a, const double* b, double* out) {
  __shared__ double smem[dev::kWarp];
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  const double first = dev::block_sum(a[i], smem);
  const double second = dev::block_sum(b[i], smem);
  out[2 * i] = first;
  out[2 * i + 1] = second;
}

// Integers in [-1000, 1000]: any order of additions gives the exact sum.
std::vector<double> random_integers(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> v(n);
  for (auto& x : v) x = static_cast<double>(static_cast<int>(rng() % 2001) - 1000);
  return v;
}

// sum_rows_kernel's order on the host: per thread a strided sum, then the halving tree.
void sum_rows_reference(const std::vector<float>& terms, std::int64_t N, double out[2]) {
  constexpr int kThreads = shapes::kReduceThreads;
  std::vector<double> s[2] = {std::vector<double>(kThreads), std::vector<double>(kThreads)};
  for (int t = 0; t < kThreads; ++t) {
    double ce = 0, kl = 0;
    for (std::int64_t r = t; r < N; r += kThreads) {
      ce += terms[2 * r];
      kl += terms[2 * r + 1];
    }
    s[0][t] = ce, s[1][t] = kl;
  }
  for (int half = kThreads / 2; half > 0; half /= 2)
    for (int t = 0; t < half; ++t) s[0][t] += s[0][t + half], s[1][t] += s[1][t + half];
  out[0] = s[0][0], out[1] = s[1][0];
}

}  // namespace

TEST_CASE("simt: block_sum twice in a row on the same slots, one warp to 32", "[simt][reduce]") {
  for (const unsigned threads : {32u, 64u, 96u, 256u, 1024u}) {
    const unsigned blocks = 3, n = blocks * threads;
    for (const std::uint64_t seed : kSeeds) {
      const auto a = random_integers(n, seed * 101 + threads), b = random_integers(n, seed * 103 + threads);
      simt::DeviceBuffer<double> da(a), db(b), out(2 * n);
      simt::launch(two_block_sums, {blocks, threads, 0, false, seed}, da.data(), db.data(), out.data());
      const auto got = out.download();
      INFO(threads << " threads, schedule seed " << seed);
      for (unsigned blk = 0; blk < blocks; ++blk) {
        double sa = 0, sb = 0;
        for (unsigned t = 0; t < threads; ++t) sa += a[blk * threads + t], sb += b[blk * threads + t];
        for (unsigned t = 0; t < threads; ++t) {
          const unsigned i = blk * threads + t;
          INFO("block " << blk << " thread " << t);
          REQUIRE(got[2 * i] == sa);
          REQUIRE(got[2 * i + 1] == sb);
        }
      }
    }
  }
}

TEST_CASE("simt: sum_rows_kernel over more rows than half its block, new data each launch",
          "[simt][reduce][loss]") {
  std::uint64_t data_seed = 1;
  for (const std::int64_t N : {129, 300, 1000}) {
    for (const std::uint64_t seed : kSeeds) {
      const auto terms = random_floats(static_cast<std::size_t>(2 * N), data_seed++, 0.0f, 8.0f);
      double want[2];
      sum_rows_reference(terms, N, want);
      simt::DeviceBuffer<float> dterms(terms);
      simt::DeviceBuffer<double> sums(2);
      simt::launch(dev::sum_rows_kernel, config(shapes::sum_rows(), seed), dterms.data(), N, sums.data());
      const auto got = sums.download();
      INFO(N << " rows, schedule seed " << seed);
      REQUIRE(std::memcmp(got.data(), want, sizeof want) == 0);
    }
  }
}
