// Row softmax: fast vs reference, stability, in place, finite-difference gradient.
#include <catch2/catch.hpp>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/sequence/softmax.hpp"
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

template <class T>
double tolerance() {
  return sizeof(T) == 4 ? 1e-5 : 1e-12;
}
}  // namespace

TEMPLATE_TEST_CASE("fast softmax matches reference", "[softmax]", float, double) {
  using T = TestType;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  set_num_threads(GENERATE(1, 2));
  const auto [M, N] = GENERATE(table<int, int>({{1, 1}, {3, 17}, {33, 10}, {256, 10}, {17, 1000}}));
  INFO("M " << M << " N " << N);
  const auto x = random_vector<T>(M * N, seed, -8.0, 8.0), dy = random_vector<T>(M * N, seed + 1);
  auto y_ref = poisoned<T>(M * N), y_fast = poisoned<T>(M * N);
  softmax_forward<T>(x.data(), y_ref.data(), M, N, Impl::reference);
  softmax_forward<T>(x.data(), y_fast.data(), M, N, Impl::fast);
  CHECK(max_rel_error(y_fast, y_ref, 1e-6) < tolerance<T>());
  for (int m = 0; m < M; ++m) {
    double s = 0;
    for (int j = 0; j < N; ++j) s += y_fast[m * N + j];
    CHECK(s == Approx(1.0).epsilon(1e-5));
  }
  auto dx_ref = poisoned<T>(M * N), dx_fast = poisoned<T>(M * N);
  softmax_backward<T>(y_ref.data(), dy.data(), dx_ref.data(), M, N, Impl::reference);
  softmax_backward<T>(y_ref.data(), dy.data(), dx_fast.data(), M, N, Impl::fast);
  // dx sums to ~0 per row (cancellation), so judge it against the RMS of dx itself.
  CHECK(rel_error(dx_fast, dx_ref) < tolerance<T>() * 10);
}

TEMPLATE_TEST_CASE("softmax is stable for large logits and works in place", "[softmax]", float,
                   double) {
  using T = TestType;
  const Impl impl = GENERATE(Impl::reference, Impl::fast);
  std::vector<T> x{1000, 1001, 1002, -1000, -1000, -1000};
  softmax_forward<T>(x.data(), x.data(), 2, 3, impl);
  const double e1 = std::exp(-1.0), e2 = std::exp(-2.0), z = 1 + e1 + e2;
  CHECK(x[0] == Approx(e2 / z).epsilon(1e-5));
  CHECK(x[1] == Approx(e1 / z).epsilon(1e-5));
  CHECK(x[2] == Approx(1 / z).epsilon(1e-5));
  CHECK(x[3] == Approx(1.0 / 3).epsilon(1e-5));
  // In-place backward (dx aliases dy).
  std::vector<T> dy{1, 0, -1, 2, 2, 2}, want(6);
  softmax_backward<T>(x.data(), dy.data(), want.data(), 2, 3, impl);
  softmax_backward<T>(x.data(), dy.data(), dy.data(), 2, 3, impl);
  CHECK(max_rel_error(dy, want) == 0.0);
  CHECK(std::abs(dy[3]) < 1e-6);  // a constant dy has zero gradient
}

TEST_CASE("softmax gradient matches finite differences", "[softmax][gradcheck]") {
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  const Impl impl = GENERATE(Impl::reference, Impl::fast);
  const int M = 4, N = 7;
  auto x = random_vector<double>(M * N, seed, -3.0, 3.0);
  const auto r = random_vector<double>(M * N, seed + 1);
  std::vector<double*> params;
  for (auto& v : x) params.push_back(&v);
  auto f = [&] {
    std::vector<double> y(M * N);
    softmax_forward<double>(x.data(), y.data(), M, N, impl);
    double s = 0;
    for (int i = 0; i < M * N; ++i) s += y[i] * r[i];
    return s;
  };
  std::vector<double> y(M * N), dx = poisoned<double>(M * N);
  softmax_forward<double>(x.data(), y.data(), M, N, impl);
  softmax_backward<double>(y.data(), r.data(), dx.data(), M, N, impl);
  CHECK(max_rel_error(dx, numeric_gradient(f, params), kGradFloor) < kGradTolerance);
}

TEST_CASE("softmax rejects empty rows", "[softmax]") {
  std::vector<float> v(4);
  CHECK_THROWS_AS(softmax_forward<float>(v.data(), v.data(), 2, 0), std::invalid_argument);
  CHECK_THROWS_AS(softmax_backward<float>(v.data(), v.data(), v.data(), -1, 2, Impl::reference),
                  std::invalid_argument);
}
