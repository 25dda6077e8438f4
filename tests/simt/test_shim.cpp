// The CUDA spellings of the shim: warp shuffles and votes with CUDA's lane rules, the
// bf16 conversions bit for bit, and the explicitly rounded arithmetic.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "simt/cuda_shim.hpp"
#include "simt/executor.hpp"

namespace {

// out[4 * t + i]: the four shuffles of lane t with argument arg and width w.
__global__ void shuffles(int arg, int width, double* out) {
  const double v = 100.0 + threadIdx.x;
  const unsigned t = threadIdx.x;
  out[4 * t + 0] = __shfl_sync(0xffffffffu, v, arg, width);
  out[4 * t + 1] = __shfl_up_sync(0xffffffffu, v, static_cast<unsigned>(arg), width);
  out[4 * t + 2] = __shfl_down_sync(0xffffffffu, v, static_cast<unsigned>(arg), width);
  out[4 * t + 3] = __shfl_xor_sync(0xffffffffu, v, arg, width);
}

__global__ void votes(unsigned* out) {
  const int pred = threadIdx.x % 3 == 0;
  out[3 * threadIdx.x + 0] = __ballot_sync(0xffffffffu, pred);
  out[3 * threadIdx.x + 1] = static_cast<unsigned>(__any_sync(0xffffffffu, threadIdx.x == 40));
  out[3 * threadIdx.x + 2] = static_cast<unsigned>(__all_sync(0xffffffffu, threadIdx.x < 64));
}

// Lanes of the lower half shuffle among themselves with a half mask, the upper half sync.
__global__ void half_masks(float* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, 1.0f * threadIdx.x, 1);
  else __syncwarp(0xffff0000u);
}

__global__ void shuffle_from_outside_mask(float* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_sync(0x0000ffffu, 1.0f, 20);
}

__global__ void mask_with_missing_lanes(float* out) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);  // launched with 48 threads
}

__global__ void lane_exits_before_collective(float* out) {
  if (threadIdx.x == 3) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

std::uint16_t reference_bf16(float f) {  // round to nearest even on the bits
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  const std::uint32_t lower = u & 0xffffu, upper = u >> 16;
  if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u))) return static_cast<std::uint16_t>(upper + 1);
  return static_cast<std::uint16_t>(upper);
}

}  // namespace

TEST_CASE("shuffles follow CUDA's lane rules for every width", "[simt]") {
  for (int width : {32, 16, 8, 2}) {
    for (int arg : {0, 1, 3, 5, 17}) {
      simt::DeviceBuffer<double> out(64 * 4);
      simt::launch(shuffles, {1, 64, 0, false, static_cast<std::uint64_t>(arg)}, arg, width,
                   out.data());
      const auto v = out.download();
      for (int t = 0; t < 64; ++t) {
        const int lane = t % 32, warp0 = t - lane, base = lane / width * width;
        const auto val = [&](int l) { return 100.0 + warp0 + l; };
        INFO("width " << width << " arg " << arg << " thread " << t);
        CHECK(v[4 * t + 0] == val(base + arg % width));
        CHECK(v[4 * t + 1] == (lane - arg >= base ? val(lane - arg) : val(lane)));
        CHECK(v[4 * t + 2] == (lane + arg < base + width ? val(lane + arg) : val(lane)));
        const int x = lane ^ arg;
        CHECK(v[4 * t + 3] == (x < base + width ? val(x) : val(lane)));
      }
    }
  }
}

TEST_CASE("votes over each warp", "[simt]") {
  simt::DeviceBuffer<unsigned> out(64 * 3);
  simt::launch(votes, {1, 64, 0, false, 5}, out.data());
  const auto v = out.download();
  for (unsigned t = 0; t < 64; ++t) {
    unsigned ballot = 0;
    for (unsigned l = 0; l < 32; ++l) ballot |= ((t / 32 * 32 + l) % 3 == 0 ? 1u : 0u) << l;
    REQUIRE(v[3 * t] == ballot);
    REQUIRE(v[3 * t + 1] == (t >= 32 ? 1u : 0u));
    REQUIRE(v[3 * t + 2] == 1u);
  }
}

TEST_CASE("partial masks: disjoint lane groups, and what a GPU leaves undefined", "[simt]") {
  simt::DeviceBuffer<float> out(64);
  simt::launch(half_masks, {1, 32, 0, false, 2}, out.data());
  const auto v = out.download();
  for (int t = 0; t < 16; ++t) REQUIRE(v[t] == static_cast<float>(t ^ 1));
  REQUIRE_THROWS_WITH(simt::launch(shuffle_from_outside_mask, {1, 32, 0, false, 2}, out.data()),
                      Catch::Contains("not in the mask"));
  REQUIRE_THROWS_WITH(simt::launch(mask_with_missing_lanes, {1, 48, 0, false, 2}, out.data()),
                      Catch::Contains("do not exist"));
  REQUIRE_THROWS_WITH(
      simt::launch(lane_exits_before_collective, {1, 32, 0, false, 2}, out.data()),
      Catch::Contains("exited"));
}

TEST_CASE("bf16 conversions match a bit-level reference", "[simt]") {
  for (std::uint32_t b = 0; b < 65536; ++b) {  // bf16 -> float -> bf16 is exact (NaN canonical)
    const float f = __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(b)));
    const auto back = __bfloat16_as_ushort(__float2bfloat16_rn(f));
    if (std::isnan(f)) REQUIRE(back == 0x7fff);
    else REQUIRE(back == b);
  }
  std::uint32_t state = 12345;
  for (int i = 0; i < 200000; ++i) {  // random float bit patterns, including ties
    state = state * 1664525u + 1013904223u;
    std::uint32_t u = state;
    if (i % 4 == 0) u = (u & 0xffff0000u) | 0x8000u;  // exact tie
    float f;
    std::memcpy(&f, &u, 4);
    REQUIRE(__bfloat16_as_ushort(__float2bfloat16_rn(f)) == reference_bf16(f));
  }
  REQUIRE(__bfloat16_as_ushort(__float2bfloat16_rn(3.4e38f)) == 0x7f80);  // rounds to +inf
  const __nv_bfloat162 two = __floats2bfloat162_rn(1.5f, -2.25f);
  REQUIRE(__low2float(two) == 1.5f);
  REQUIRE(__high2float(two) == -2.25f);
  static_assert(sizeof(__nv_bfloat16) == 2 && alignof(__nv_bfloat162) == 4);
}

TEST_CASE("explicitly rounded operations are never fused", "[simt]") {
  // a*b + c with one rounding (fmaf) differs from two roundings for these inputs.
  // (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: the product rounds the 2^-24 away (a tie, to even).
  const float a = 1.0f + 0x1p-12f, b = a, c = -1.0f;
  REQUIRE(__fadd_rn(__fmul_rn(a, b), c) != std::fma(a, b, c));
  REQUIRE(__fadd_rn(__fmul_rn(a, b), c) == 0x1p-11f);
  REQUIRE(__fmaf_rn(a, b, c) == std::fma(a, b, c));
  static_assert(sizeof(float4) == 16 && alignof(float4) == 16 && alignof(uint2) == 8);
}
