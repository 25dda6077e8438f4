// The cuDNN descriptor plans and the algorithm choice (kernels/cuda/plans/cudnn_plan.hpp):
// dimensions and strides against the CPU's shapes, int-range refusals, and the choice over
// fabricated candidate lists (deterministic only, workspace cap, no silent fallback), for
// each of the three passes conv2d.cu's one picker serves.
#include <catch2/catch.hpp>

#include <climits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/plans/cudnn_plan.hpp"

namespace {

using namespace codistill::kernels;
using cuda::plans::AlgoCandidate;
using cuda::plans::ConvPass;
using cuda::plans::kConvWorkspaceCap;

// Output size by counting window positions, independently of Conv2dShape's formula.
std::int64_t positions(std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t pad) {
  std::int64_t n = 0;
  for (std::int64_t start = -pad; start + k <= in + pad; start += stride) ++n;
  return n;
}

Conv2dShape small_conv() {
  Conv2dShape s;
  s.batch = 4, s.in_channels = 3, s.height = 28, s.width = 17, s.out_channels = 8;
  s.kernel_h = s.kernel_w = 3, s.pad_h = s.pad_w = 1;
  return s;
}

// The rule conv2d.cu's picker must follow, written out independently: the first candidate
// that succeeded, whose workspace query succeeded, that is deterministic and needs at most
// 1 GiB; none: no algorithm at all (the picker throws, never falling back).
std::optional<std::size_t> expected_pick(const std::vector<AlgoCandidate>& ranked) {
  for (std::size_t i = 0; i < ranked.size(); ++i) {
    const AlgoCandidate& c = ranked[i];
    if (c.ok && c.usable && c.deterministic && c.workspace <= kConvWorkspaceCap) return i;
  }
  return std::nullopt;
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

TEST_CASE("the convolution passes have the names the picker's messages use", "[plans]") {
  using cuda::plans::conv_pass_name;
  CHECK(std::string(conv_pass_name(ConvPass::forward)) == "forward");
  CHECK(std::string(conv_pass_name(ConvPass::backward_data)) == "backward-data");
  CHECK(std::string(conv_pass_name(ConvPass::backward_filter)) == "backward-filter");
  REQUIRE_THROWS_AS(conv_pass_name(static_cast<ConvPass>(7)), std::invalid_argument);
}

TEST_CASE("the one picker, for each pass: deterministic within 1 GiB, no fallback", "[plans]") {
  using cuda::plans::choose_conv_algorithm;
  const std::string shape = cuda::plans::shape_string(small_conv());
  for (const ConvPass pass : cuda::plans::kConvPasses) {
    const std::string what = std::string("conv2d ") + cuda::plans::conv_pass_name(pass) + " " + shape;
    INFO(what);
    const std::size_t cap = kConvWorkspaceCap;
    // A fast nondeterministic one, a failed one, a deterministic one 1 byte over the cap,
    // then one exactly at the cap: the last is taken.
    std::vector<AlgoCandidate> ranked = {{1, true, false, true, 0}, {2, false, true, true, 0},
                                         {3, true, true, true, cap + 1}, {4, true, true, true, cap}};
    auto c = choose_conv_algorithm(pass, ranked, shape);
    CHECK(c.index == 3);
    CHECK_FALSE(c.nondeterministic);
    // Its workspace query failed: nothing deterministic is left, and the nondeterministic
    // one that fits is still refused, with the pass and the shape in the message.
    ranked[3].usable = false;
    REQUIRE_THROWS_WITH(choose_conv_algorithm(pass, ranked, shape),
                        Catch::Contains(what + " (cuda): no deterministic cuDNN algorithm fits "
                                               "the workspace cap of 1024 MiB") &&
                            Catch::Contains("1 deterministic one(s) need more"));
    // An empty list (cuDNN returned no candidates) is refused the same way.
    REQUIRE_THROWS_WITH(choose_conv_algorithm(pass, {}, shape),
                        Catch::Contains(what) && Catch::Contains("0 deterministic one(s) need more"));
  }
}

TEST_CASE("the one picker follows its rule on random candidate lists, for each pass", "[plans]") {
  using cuda::plans::choose_conv_algorithm;
  const std::uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const std::size_t cap = kConvWorkspaceCap;
  const std::size_t sizes[] = {0, 1, cap / 2, cap - 1, cap, cap + 1, 2 * cap};
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<AlgoCandidate> ranked(rng() % 9);
    for (std::size_t i = 0; i < ranked.size(); ++i) {
      AlgoCandidate& c = ranked[i];
      c.algo = static_cast<int>(i);
      c.ok = rng() % 4 != 0;
      c.deterministic = rng() % 3 != 0;
      c.usable = c.ok && rng() % 5 != 0;
      c.workspace = sizes[rng() % std::size(sizes)];
    }
    const auto want = expected_pick(ranked);
    for (const ConvPass pass : cuda::plans::kConvPasses) {
      INFO("trial " << trial << ", " << cuda::plans::conv_pass_name(pass));
      if (!want) {
        REQUIRE_THROWS_AS(choose_conv_algorithm(pass, ranked, "[shape]"), std::runtime_error);
        continue;
      }
      const auto c = choose_conv_algorithm(pass, ranked, "[shape]");
      REQUIRE(c.index == *want);
      REQUIRE_FALSE(c.nondeterministic);
    }
  }
}
