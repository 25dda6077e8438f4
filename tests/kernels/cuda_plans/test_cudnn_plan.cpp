// The cuDNN descriptor plans and the algorithm choice (kernels/cuda/plans/cudnn_plan.hpp):
// dimensions and strides against the CPU's shapes, int-range refusals, and the choice over
// fabricated candidate lists (deterministic only, workspace cap, no silent fallback).
#include <catch2/catch.hpp>

#include <climits>
#include <vector>

#include "kernels/cuda/plans/cudnn_plan.hpp"

namespace {

using namespace codistill::kernels;
using cuda::plans::AlgoCandidate;

// Output size by counting window positions, independently of Conv2dShape's formula.
std::int64_t positions(std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t pad) {
  std::int64_t n = 0;
  for (std::int64_t start = -pad; start + k <= in + pad; start += stride) ++n;
  return n;
}

}  // namespace

TEST_CASE("cuDNN descriptors carry the CPU's NCHW shapes and contiguous strides", "[plans]") {
  for (const std::int64_t stride : {1, 2, 3})
    for (const std::int64_t pad : {0, 1, 2})
      for (const std::int64_t k : {1, 3, 5}) {
        Conv2dShape s;
        s.batch = 4, s.in_channels = 3, s.height = 28, s.width = 17, s.out_channels = 8;
        s.kernel_h = k, s.kernel_w = k == 1 ? 1 : k - 1, s.stride_h = stride, s.stride_w = 1;
        s.pad_h = pad, s.pad_w = pad;
        if (s.kernel_h > s.height + 2 * pad) continue;
        const auto d = cuda::plans::conv_descriptors(s);
        INFO("k=" << k << " stride=" << stride << " pad=" << pad);
        CHECK(d.x.dims == std::array<int, 4>{4, 3, 28, 17});
        CHECK(d.x.strides == std::array<int, 4>{3 * 28 * 17, 28 * 17, 17, 1});
        const int oh = static_cast<int>(positions(28, s.kernel_h, stride, pad));
        const int ow = static_cast<int>(positions(17, s.kernel_w, 1, pad));
        CHECK(oh == s.out_height());
        CHECK(ow == s.out_width());
        CHECK(d.y.dims == std::array<int, 4>{4, 8, oh, ow});
        CHECK(d.y.strides == std::array<int, 4>{8 * oh * ow, oh * ow, ow, 1});
        CHECK(d.w.dims == std::array<int, 4>{8, 3, static_cast<int>(s.kernel_h),
                                             static_cast<int>(s.kernel_w)});
        CHECK(d.conv.pad_h == pad);
        CHECK(d.conv.stride_h == stride);
        CHECK(d.conv.stride_w == 1);
        CHECK(d.conv.dilation_h == 1);
      }
}

TEST_CASE("cuDNN descriptors refuse sizes beyond int", "[plans]") {
  Conv2dShape s;
  s.batch = 2, s.in_channels = 70000, s.height = 200, s.width = 200, s.out_channels = 1;
  s.kernel_h = s.kernel_w = 1;
  REQUIRE_THROWS_WITH(cuda::plans::conv_descriptors(s), Catch::Contains("exceeds cuDNN's int range"));
}

TEST_CASE("the algorithm choice: deterministic within the cap, never a silent fallback", "[plans]") {
  using cuda::plans::choose_algorithm;
  const std::size_t cap = 1 << 20;
  // ranked by cuDNN: a fast nondeterministic one, a failed one, a deterministic one too big,
  // then a deterministic one that fits.
  std::vector<AlgoCandidate> ranked = {{1, true, false, true, 0}, {2, false, true, true, 0},
                                       {3, true, true, true, 2 * cap}, {4, true, true, true, cap}};
  auto c = choose_algorithm(ranked, cap, true, "conv2d forward");
  CHECK(c.index == 3);
  CHECK_FALSE(c.nondeterministic);
  // A deterministic one whose workspace query failed is not usable.
  ranked[3].usable = false;
  REQUIRE_THROWS_WITH(choose_algorithm(ranked, cap, true, "conv2d backward-filter [2, 3]"),
                      Catch::Contains("conv2d backward-filter [2, 3]") &&
                          Catch::Contains("no deterministic cuDNN algorithm fits") &&
                          Catch::Contains("1 deterministic one(s) need more"));
  // When reproducibility is not required, the nondeterministic one is used and said so.
  c = choose_algorithm(ranked, cap, false, "conv2d forward");
  CHECK(c.index == 0);
  CHECK(c.nondeterministic);
  // Nothing usable at all.
  REQUIRE_THROWS_WITH(choose_algorithm({{1, false, true, true, 0}}, cap, false, "conv2d forward"),
                      Catch::Contains("no usable algorithm"));
}
