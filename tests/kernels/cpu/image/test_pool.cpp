// Max pooling: fast vs reference (values and argmax), tie rule, gradients, bad shapes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/image/pool.hpp"
#include "support/test_util.hpp"

using namespace codistill::kernels::cpu;
using codistill::test::fresh_seed;
using codistill::test::max_rel_error;
using codistill::test::numeric_gradient;
using codistill::test::poisoned;
using codistill::test::random_vector;
using codistill::test::kGradFloor;
using codistill::test::kGradTolerance;
using codistill::test::rel_error;

namespace {

Pool2dShape shape(std::int64_t B, std::int64_t C, std::int64_t H, std::int64_t W, std::int64_t K,
                  std::int64_t S) {
  Pool2dShape s;
  s.batch = B;
  s.channels = C;
  s.height = H;
  s.width = W;
  s.kernel = K;
  s.stride = S;
  return s;
}

// Distinct values 0.01 apart in random order: no ties, and a finite-difference step of 1e-6
// never changes which element is the maximum.
std::vector<double> distinct_values(std::size_t n, std::uint64_t seed) {
  std::vector<double> v(n);
  std::iota(v.begin(), v.end(), 0.0);
  std::mt19937_64 gen(seed);
  std::shuffle(v.begin(), v.end(), gen);
  for (auto& x : v) x = x * 0.01 - 0.005 * static_cast<double>(n);
  return v;
}

}  // namespace

TEMPLATE_TEST_CASE("fast maxpool matches reference", "[pool]", float, double) {
  using T = TestType;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  set_num_threads(2);
  // 2x2/2 (the specialised path, even and odd inputs), overlapping 3x3/2, 3x3/1, 1x1.
  const auto [B, C, H, W, K, S] = GENERATE(table<int, int, int, int, int, int>({{1, 1, 2, 2, 2, 2},
                                                                                {3, 5, 28, 28, 2, 2},
                                                                                {2, 3, 7, 9, 2, 2},
                                                                                {4, 33, 14, 14, 2, 2},
                                                                                {2, 3, 9, 11, 3, 2},
                                                                                {1, 2, 5, 6, 3, 1},
                                                                                {2, 2, 3, 4, 1, 1},
                                                                                {2, 3, 17, 5, 5, 3}}));
  const auto s = shape(B, C, H, W, K, S);
  INFO("B " << B << " C " << C << " " << H << "x" << W << " kernel " << K << " stride " << S);
  const auto n_out = static_cast<std::size_t>(B * C * s.out_height() * s.out_width());
  const auto x = random_vector<T>(static_cast<std::size_t>(B * C * H * W), seed);
  auto y_ref = poisoned<T>(n_out), y_fast = poisoned<T>(n_out);
  std::vector<std::int32_t> a_ref(n_out, -7), a_fast(n_out, -7);
  maxpool2d_forward<T>(x.data(), y_ref.data(), a_ref.data(), s, Impl::reference);
  maxpool2d_forward<T>(x.data(), y_fast.data(), a_fast.data(), s, Impl::fast);
  CHECK(max_rel_error(y_fast, y_ref) == 0.0);
  CHECK(a_fast == a_ref);

  const auto dy = random_vector<T>(n_out, seed + 1);
  auto dx_ref = poisoned<T>(x.size()), dx_fast = poisoned<T>(x.size());
  maxpool2d_backward<T>(dy.data(), a_ref.data(), dx_ref.data(), s, Impl::reference);
  maxpool2d_backward<T>(dy.data(), a_ref.data(), dx_fast.data(), s, Impl::fast);
  CHECK(max_rel_error(dx_fast, dx_ref) < (sizeof(T) == 4 ? 1e-6 : 1e-14));
}

// The 2x2 windows' fast path runs through gather tables over runs of planes (short rows) or
// along the rows (stride 2, rows of 32 outputs or more), in one copy per ISA: each copy,
// strides 1 to 3, plane counts that split unevenly into the tables' groups and the threads,
// against the reference bit for bit (values and argmax) on inputs with ties, zeros of both
// signs and NaNs.
TEMPLATE_TEST_CASE("fast 2x2 maxpool: every ISA copy gives the reference's bits, NaN and ties included", "[pool]",
                   float, double) {
  using T = TestType;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  set_num_threads(2);
  const auto [B, C, H, W, S] = GENERATE(table<int, int, int, int, int>({{1, 1, 2, 2, 2},
                                                                          {3, 50, 14, 14, 2},
                                                                          {2, 7, 28, 28, 2},
                                                                          {5, 3, 7, 9, 2},
                                                                          {2, 9, 6, 7, 1},
                                                                          {3, 4, 11, 8, 3},
                                                                          {2, 5, 66, 70, 2},
                                                                          {1, 3, 9, 80, 1}}));
  const auto s = shape(B, C, H, W, 2, S);
  INFO("B " << B << " C " << C << " " << H << "x" << W << " stride " << S);
  const auto n_in = static_cast<std::size_t>(B * C * H * W);
  const auto n_out = static_cast<std::size_t>(B * C * s.out_height() * s.out_width());
  std::vector<T> x(n_in);
  std::mt19937_64 gen(seed);
  for (T& v : x) {
    const auto r = gen() % 32;
    v = r == 0 ? std::numeric_limits<T>::quiet_NaN() : r == 1 ? T(-0.0) : static_cast<T>(r % 5) - T(2);
  }
  std::vector<T> y_ref(n_out);
  std::vector<std::int32_t> a_ref(n_out);
  maxpool2d_forward<T>(x.data(), y_ref.data(), a_ref.data(), s, Impl::reference);
  for (const char* isa : {"baseline", "avx2", "avx512"}) {
    INFO("isa " << isa);
    codistill::test::IsaScope scope(isa);
    std::vector<T> y(n_out, T(7.5));
    std::vector<std::int32_t> a(n_out, -7);
    maxpool2d_forward<T>(x.data(), y.data(), a.data(), s, Impl::fast);
    CHECK(std::memcmp(y.data(), y_ref.data(), n_out * sizeof(T)) == 0);
    CHECK(a == a_ref);
  }
}

TEST_CASE("maxpool ties go to the first maximum in row-major window order", "[pool]") {
  const Impl impl = GENERATE(Impl::reference, Impl::fast);
  for (int K : {2, 3}) {
    const auto s = shape(1, 1, 6, 6, K, K);
    const std::vector<float> x(36, 1.5f);
    std::vector<float> y(static_cast<std::size_t>(s.out_height() * s.out_width()));
    std::vector<std::int32_t> a(y.size());
    maxpool2d_forward<float>(x.data(), y.data(), a.data(), s, impl);
    // Window (oh, ow) starts at row oh*K, column ow*K of the 6-wide plane.
    for (std::int64_t oh = 0; oh < s.out_height(); ++oh)
      for (std::int64_t ow = 0; ow < s.out_width(); ++ow)
        CHECK(a[oh * s.out_width() + ow] == oh * K * 6 + ow * K);
  }
  // A later, strictly larger element wins; an equal later one does not.
  const auto s = shape(1, 1, 2, 2, 2, 2);
  const std::vector<float> x{1.f, 3.f, 2.f, 3.f};
  float y = 0;
  std::int32_t a = -1;
  maxpool2d_forward<float>(x.data(), &y, &a, s, impl);
  CHECK(y == 3.f);
  CHECK(a == 1);
}

TEST_CASE("maxpool gradient matches finite differences", "[pool][gradcheck]") {
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  const Impl impl = GENERATE(Impl::reference, Impl::fast);
  // Non-overlapping and overlapping windows (the latter adds several dy into one dx).
  const auto [K, S] = GENERATE(table<int, int>({{2, 2}, {3, 1}, {3, 2}}));
  INFO("kernel " << K << " stride " << S);
  const auto s = shape(2, 2, 7, 6, K, S);
  auto x = distinct_values(2 * 2 * 7 * 6, seed);
  const auto n_out = static_cast<std::size_t>(2 * 2 * s.out_height() * s.out_width());
  const auto r = random_vector<double>(n_out, seed + 1);
  std::vector<double*> params;
  for (auto& v : x) params.push_back(&v);
  auto f = [&] {
    std::vector<double> y(n_out);
    std::vector<std::int32_t> a(n_out);
    maxpool2d_forward<double>(x.data(), y.data(), a.data(), s, impl);
    double acc = 0;
    for (std::size_t i = 0; i < n_out; ++i) acc += y[i] * r[i];
    return acc;
  };
  std::vector<double> y(n_out);
  std::vector<std::int32_t> a(n_out);
  maxpool2d_forward<double>(x.data(), y.data(), a.data(), s, impl);
  auto dx = poisoned<double>(x.size());
  maxpool2d_backward<double>(r.data(), a.data(), dx.data(), s, impl);
  CHECK(max_rel_error(dx, numeric_gradient(f, params), kGradFloor) < kGradTolerance);
}

TEST_CASE("maxpool rejects impossible shapes", "[pool]") {
  std::vector<float> buf(64);
  std::vector<std::int32_t> a(64);
  const Impl impl = GENERATE(Impl::reference, Impl::fast);
  for (const auto& s : {shape(1, 1, 3, 8, 4, 2),    // window taller than the input
                        shape(1, 1, 8, 3, 4, 1),    // window wider than the input
                        shape(0, 1, 4, 4, 2, 2),    // empty batch
                        shape(1, 0, 4, 4, 2, 2),    // no channels
                        shape(1, 1, 4, 4, 0, 1),    // zero window
                        shape(1, 1, 4, 4, 2, 0)}) {  // zero stride
    CHECK_THROWS_AS(s.validate(), std::invalid_argument);
    CHECK_THROWS_AS(maxpool2d_forward<float>(buf.data(), buf.data(), a.data(), s, impl),
                    std::invalid_argument);
    CHECK_THROWS_AS(maxpool2d_backward<float>(buf.data(), a.data(), buf.data(), s, impl),
                    std::invalid_argument);
  }
  CHECK_NOTHROW(shape(1, 1, 4, 4, 4, 1).validate());  // window exactly the input
}
