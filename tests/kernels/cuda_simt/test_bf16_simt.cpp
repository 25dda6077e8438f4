// The CUDA backend's bf16 rounding kernel (kernels/cuda/device/bf16.cuh, what every bf16
// GEMM operand goes through), run from its real source under the SIMT executor with the
// launch shape of launch_shapes.hpp, against the CPU's rule (kernels/cpu/bf16.hpp) bit for
// bit: random bit patterns (NaNs, infinities, subnormals in bulk) and the edge cases, sizes
// below a block, across blocks and past the grid cap, 32- and 64-bit indices, several
// schedules; the output poisoned first (0xffff, which no input here rounds to).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/bf16.hpp"
#include "kernels/cuda/device/bf16.cuh"
#include "tests/kernels/cuda_simt/simt_support.hpp"

namespace {

using namespace codistill;
using namespace codistill::test::simt_kernels;
namespace dev = kernels::cuda::device;

std::vector<float> patterns(std::size_t n, std::uint64_t seed) {
  std::vector<float> x(n);
  std::uint64_t z = seed;
  for (float& v : x) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    std::uint32_t u = static_cast<std::uint32_t>(z >> 32);
    if (kernels::cpu::bf16_round([&] { float f; std::memcpy(&f, &u, 4); return f; }()) == 0xffff) u = 0;
    std::memcpy(&v, &u, sizeof v);
  }
  const std::uint32_t edges[] = {0x3f808000u, 0x3f818000u, 0x7f800001u, 0xff800000u, 0x00018000u,
                                 0x00008000u, 0x7f7fffffu, 0x80000000u, 0x7fc00000u};
  for (std::size_t i = 0; i < std::min(n, std::size(edges)); ++i) std::memcpy(&x[i], &edges[i], 4);
  return x;
}

template <class I>
void check(std::int64_t n, std::uint64_t seed) {
  INFO("n " << n << ", index bytes " << sizeof(I) << ", schedule seed " << seed);
  const auto x = patterns(static_cast<std::size_t>(n), seed + 99);
  std::vector<std::uint16_t> want(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) want[i] = kernels::cpu::bf16_round(x[i]);
  simt::DeviceBuffer<float> dx(x);
  simt::DeviceBuffer<std::uint16_t> dy(x.size());  // poisoned: 0xffff
  simt::launch(dev::round_to_bf16_kernel<I>, config(shapes::elementwise(n), seed), dx.data(), dy.data(),
               static_cast<I>(n));
  const auto got = dy.download();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) wrong += got[i] != want[i];
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("bf16 rounding kernel: the CPU's rule bit for bit", "[simt][bf16]") {
  for (std::uint64_t seed : kSeeds)
    for (std::int64_t n : {1, 7, 256, 1000, 70001}) {
      check<std::uint32_t>(n, seed);
      check<std::uint64_t>(n, seed);
    }
}

TEST_CASE("bf16 rounding kernel: a grid capped below the work walks it all", "[simt][bf16]") {
  // shapes::elementwise caps the grid at 65536 blocks of 256: past 2^24 elements each thread
  // walks several. Too large to run under the executor in seconds, so the cap is checked on
  // the shape and a small launch walks a stride instead.
  const auto l = shapes::elementwise(std::int64_t{1} << 26);
  CHECK(static_cast<std::int64_t>(l.grid.x) * l.block.x < (std::int64_t{1} << 26));
  const std::int64_t n = 5000;
  const auto x = patterns(static_cast<std::size_t>(n), 7);
  simt::DeviceBuffer<float> dx(x);
  simt::DeviceBuffer<std::uint16_t> dy(x.size());
  simt::launch(dev::round_to_bf16_kernel<std::uint32_t>, simt::LaunchConfig{dim3(3), dim3(64), 0, false, 5},
               dx.data(), dy.data(), static_cast<std::uint32_t>(n));
  const auto got = dy.download();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) wrong += got[i] != kernels::cpu::bf16_round(x[i]);
  CHECK(wrong == 0);
}
