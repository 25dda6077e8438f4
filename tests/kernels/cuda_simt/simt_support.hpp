#pragma once
// Shared by the tests that run the CUDA backend's kernels under the SIMT executor: the
// launch configuration from a launch shape (the shapes a GPU gets: launch_shapes.hpp and
// each kernel's device header),
// the device properties the shapes are computed for, an occupancy stand-in, random data
// and the error measure.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cuda/launch_shapes.hpp"
#include "simt/executor.hpp"

namespace codistill::test::simt_kernels {

namespace shapes = kernels::cuda::shapes;

// The schedules each kernel runs under.
inline constexpr std::uint64_t kSeeds[] = {1, 2, 3, 0x5eed};

inline simt::LaunchConfig config(const shapes::Launch& l, std::uint64_t seed) {
  return {dim3(l.grid.x, l.grid.y, l.grid.z), dim3(l.block.x, l.block.y, l.block.z), l.smem,
          false, seed};
}

// An H100 (132 SMs, 50 MiB L2), a small GPU (a T4: 40 SMs, 4 MiB L2) and a one-SM device on
// which a persistent grid of few blocks must walk many rows.
inline constexpr shapes::DeviceProps kH100{132, 50ll << 20}, kT4{40, 4ll << 20}, kTiny{1, 1 << 20};

// What cudaOccupancyMaxActiveBlocksPerMultiprocessor would answer on a Hopper SM, bounded by
// threads (2048 per SM), blocks (32 per SM) and shared memory (228 KiB per SM, 1 KiB
// reserved per block, plus the kernel's static arrays).
inline int occupancy(int threads, std::size_t dynamic_smem, std::size_t static_smem) {
  const int by_threads = 2048 / threads;
  const int by_smem = static_cast<int>((228u << 10) / (dynamic_smem + static_smem + 1024));
  return std::max(1, std::min({by_threads, 32, by_smem}));
}

inline std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// max |got - want| over max(max |want|, floor): 0 when equal; NaN where only one is NaN
// counts as infinitely wrong.
inline double scaled_error(const std::vector<float>& got, const std::vector<float>& want,
                           double floor = 1e-6) {
  double scale = floor, err = 0;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return INFINITY;
    if (std::isnan(want[i]) || got[i] == want[i]) continue;
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  return err / scale;
}

}  // namespace codistill::test::simt_kernels
