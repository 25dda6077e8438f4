// ReLU, exact GELU and SiLU: fast vs reference, in place, finite-difference gradients.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/activation.hpp"
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
  return sizeof(T) == 4 ? 1e-4 : 1e-12;
}

// Inputs at least `gap` away from 0, so a finite-difference step never crosses ReLU's kink.
std::vector<double> away_from_zero(std::size_t n, std::uint64_t seed, double gap) {
  auto v = random_vector<double>(n, seed, -2.0, 2.0);
  for (auto& x : v)
    if (std::abs(x) < gap) x = x < 0 ? x - gap : x + gap;
  return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

TEMPLATE_TEST_CASE("fast activations match reference", "[activation]", float, double) {
  using T = TestType;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  set_num_threads(2);
  // 1 .. 33 stay serial; 70001 takes the threaded path with an odd tail.
  const int n = GENERATE(1, 3, 17, 33, 4099, 70001);
  INFO("n " << n);
  const auto x = random_vector<T>(n, seed, -7.0, 7.0), dy = random_vector<T>(n, seed + 1);

  auto y_ref = poisoned<T>(n), y_fast = poisoned<T>(n);
  relu_forward<T>(x.data(), y_ref.data(), n, Impl::reference);
  relu_forward<T>(x.data(), y_fast.data(), n, Impl::fast);
  CHECK(max_rel_error(y_fast, y_ref) == 0.0);
  auto dx_ref = poisoned<T>(n), dx_fast = poisoned<T>(n);
  relu_backward<T>(y_ref.data(), dy.data(), dx_ref.data(), n, Impl::reference);
  relu_backward<T>(y_ref.data(), dy.data(), dx_fast.data(), n, Impl::fast);
  CHECK(max_rel_error(dx_fast, dx_ref) == 0.0);

  y_ref = poisoned<T>(n);
  y_fast = poisoned<T>(n);
  gelu_forward<T>(x.data(), y_ref.data(), n, Impl::reference);
  gelu_forward<T>(x.data(), y_fast.data(), n, Impl::fast);
  CHECK(max_rel_error(y_fast, y_ref) < tolerance<T>());
  dx_ref = poisoned<T>(n);
  dx_fast = poisoned<T>(n);
  gelu_backward<T>(x.data(), dy.data(), dx_ref.data(), n, Impl::reference);
  gelu_backward<T>(x.data(), dy.data(), dx_fast.data(), n, Impl::fast);
  CHECK(max_rel_error(dx_fast, dx_ref) < tolerance<T>());

  y_ref = poisoned<T>(n);
  y_fast = poisoned<T>(n);
  silu_forward<T>(x.data(), y_ref.data(), n, Impl::reference);
  silu_forward<T>(x.data(), y_fast.data(), n, Impl::fast);
  CHECK(max_rel_error(y_fast, y_ref) < tolerance<T>());
  dx_ref = poisoned<T>(n);
  dx_fast = poisoned<T>(n);
  silu_backward<T>(x.data(), dy.data(), dx_ref.data(), n, Impl::reference);
  silu_backward<T>(x.data(), dy.data(), dx_fast.data(), n, Impl::fast);
  CHECK(max_rel_error(dx_fast, dx_ref) < tolerance<T>());

  y_ref = poisoned<T>(n);
  y_fast = poisoned<T>(n);
  gelu_tanh_forward<T>(x.data(), y_ref.data(), n, Impl::reference);
  gelu_tanh_forward<T>(x.data(), y_fast.data(), n, Impl::fast);
  CHECK(max_rel_error(y_fast, y_ref) < tolerance<T>());
  dx_ref = poisoned<T>(n);
  dx_fast = poisoned<T>(n);
  gelu_tanh_backward<T>(x.data(), dy.data(), dx_ref.data(), n, Impl::reference);
  gelu_tanh_backward<T>(x.data(), dy.data(), dx_fast.data(), n, Impl::fast);
  CHECK(max_rel_error(dx_fast, dx_ref) < tolerance<T>());
}

TEST_CASE("activations have the documented values", "[activation]") {
  const std::vector<double> x{-2.0, -0.5, 0.0, 0.5, 2.0};
  for (Impl impl : {Impl::reference, Impl::fast}) {
    std::vector<double> y(5);
    relu_forward<double>(x.data(), y.data(), 5, impl);
    CHECK(y == std::vector<double>{0, 0, 0, 0.5, 2.0});
    gelu_forward<double>(x.data(), y.data(), 5, impl);
    // PyTorch's gelu(approximate='none') at these points.
    const std::vector<double> want{-0.04550026389635842, -0.15426876936299347, 0.0,
                                   0.34573123063700656, 1.9544997361036416};
    CHECK(max_rel_error(y, want) < 1e-12);
    silu_forward<double>(x.data(), y.data(), 5, impl);
    // PyTorch's silu at these points.
    const std::vector<double> silu_want{-0.2384058440442351, -0.1887703343990727, 0.0, 0.3112296656009273,
                                        1.7615941559557646};
    CHECK(max_rel_error(y, silu_want) < 1e-12);
    gelu_tanh_forward<double>(x.data(), y.data(), 5, impl);
    // PyTorch's gelu(approximate='tanh') at these points.
    const std::vector<double> tanh_want{-0.04540230591222494, -0.15428599017485606, 0.0, 0.34571400982514394,
                                        1.954597694087775};
    CHECK(max_rel_error(y, tanh_want) < 1e-12);
  }
}

TEMPLATE_TEST_CASE("silu handles the tails, infinities and NaN", "[activation]", float, double) {
  using T = TestType;
  const Impl impl = GENERATE(Impl::reference, Impl::fast);
  INFO((impl == Impl::reference ? "reference" : "fast"));
  constexpr T inf = std::numeric_limits<T>::infinity();
  // -90 and 90 are past the float fast path's exponential (|x| > 87).
  const std::vector<T> x{T(-90), T(-40), T(40), T(90), inf, -inf, std::numeric_limits<T>::quiet_NaN()};
  const auto n = static_cast<std::int64_t>(x.size());
  std::vector<T> y(x.size()), dx(x.size());
  const std::vector<T> ones(x.size(), T(1));
  silu_forward<T>(x.data(), y.data(), n, impl);
  silu_backward<T>(x.data(), ones.data(), dx.data(), n, impl);
  CHECK(std::abs(y[0]) < 1e-30);
  CHECK(std::abs(y[1]) < 1e-15);  // -40 * sigmoid(-40) = -1.7e-16
  CHECK(y[2] == T(40));
  CHECK(y[3] == T(90));
  CHECK(y[4] == inf);
  CHECK(std::isnan(y[5]));  // -inf * sigmoid(-inf) = -inf * 0
  CHECK(std::isnan(y[6]));
  CHECK(std::abs(dx[0]) < 1e-30);
  CHECK(std::abs(dx[1]) < 1e-15);
  CHECK(dx[2] == T(1));
  CHECK(dx[3] == T(1));
  CHECK(std::isnan(dx[6]));
}

TEMPLATE_TEST_CASE("gelu handles the tails and NaN", "[activation]", float, double) {
  using T = TestType;
  const Impl impl = GENERATE(Impl::reference, Impl::fast);
  const std::vector<T> x{T(-40), T(-12), T(12), T(40), std::numeric_limits<T>::quiet_NaN()};
  std::vector<T> y(x.size()), dx(x.size());
  const std::vector<T> ones(x.size(), T(1));
  gelu_forward<T>(x.data(), y.data(), 5, impl);
  gelu_backward<T>(x.data(), ones.data(), dx.data(), 5, impl);
  CHECK(std::abs(y[0]) < 1e-30);
  CHECK(std::abs(y[1]) < 1e-30);  // -12 * Phi(-12) = -2e-32
  CHECK(y[2] == T(12));
  CHECK(y[3] == T(40));
  CHECK(std::isnan(y[4]));
  CHECK(std::abs(dx[0]) < 1e-30);
  CHECK(dx[3] == T(1));
  CHECK(std::isnan(dx[4]));
}

TEMPLATE_TEST_CASE("activations work in place", "[activation]", float, double) {
  using T = TestType;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  const Impl impl = GENERATE(Impl::reference, Impl::fast);
  const int n = 40000;
  const auto x = random_vector<T>(n, seed, -3.0, 3.0), dy = random_vector<T>(n, seed + 1);
  auto want = poisoned<T>(n);
  gelu_forward<T>(x.data(), want.data(), n, impl);
  auto inplace = x;
  gelu_forward<T>(inplace.data(), inplace.data(), n, impl);
  CHECK(max_rel_error(inplace, want) == 0.0);

  silu_forward<T>(x.data(), want.data(), n, impl);
  inplace = x;
  silu_forward<T>(inplace.data(), inplace.data(), n, impl);
  CHECK(max_rel_error(inplace, want) == 0.0);
  auto silu_dx = poisoned<T>(n);
  silu_backward<T>(x.data(), dy.data(), silu_dx.data(), n, impl);
  auto silu_d = dy;
  silu_backward<T>(x.data(), silu_d.data(), silu_d.data(), n, impl);
  CHECK(max_rel_error(silu_d, silu_dx) == 0.0);

  gelu_tanh_forward<T>(x.data(), want.data(), n, impl);
  inplace = x;
  gelu_tanh_forward<T>(inplace.data(), inplace.data(), n, impl);
  CHECK(max_rel_error(inplace, want) == 0.0);
  auto tanh_dx = poisoned<T>(n);
  gelu_tanh_backward<T>(x.data(), dy.data(), tanh_dx.data(), n, impl);
  auto tanh_d = dy;
  gelu_tanh_backward<T>(x.data(), tanh_d.data(), tanh_d.data(), n, impl);
  CHECK(max_rel_error(tanh_d, tanh_dx) == 0.0);

  relu_forward<T>(x.data(), want.data(), n, impl);
  auto dx_want = poisoned<T>(n);
  relu_backward<T>(want.data(), dy.data(), dx_want.data(), n, impl);
  auto d = dy;
  relu_backward<T>(want.data(), d.data(), d.data(), n, impl);
  CHECK(max_rel_error(d, dx_want) == 0.0);
}

TEST_CASE("activation gradients match finite differences", "[activation][gradcheck]") {
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  const Impl impl = GENERATE(Impl::reference, Impl::fast);
  const int n = 64;
  auto x = away_from_zero(n, seed, 0.01);
  const auto r = random_vector<double>(n, seed + 1);
  std::vector<double*> params;
  for (auto& v : x) params.push_back(&v);

  auto relu_f = [&] {
    std::vector<double> y(n);
    relu_forward<double>(x.data(), y.data(), n, impl);
    return dot(y, r);
  };
  std::vector<double> y(n), dx = poisoned<double>(n);
  relu_forward<double>(x.data(), y.data(), n, impl);
  relu_backward<double>(y.data(), r.data(), dx.data(), n, impl);
  CHECK(max_rel_error(dx, numeric_gradient(relu_f, params), kGradFloor) < kGradTolerance);

  auto gelu_f = [&] {
    std::vector<double> g(n);
    gelu_forward<double>(x.data(), g.data(), n, impl);
    return dot(g, r);
  };
  dx = poisoned<double>(n);
  gelu_backward<double>(x.data(), r.data(), dx.data(), n, impl);
  CHECK(max_rel_error(dx, numeric_gradient(gelu_f, params), kGradFloor) < kGradTolerance);

  auto silu_f = [&] {
    std::vector<double> g(n);
    silu_forward<double>(x.data(), g.data(), n, impl);
    return dot(g, r);
  };
  dx = poisoned<double>(n);
  silu_backward<double>(x.data(), r.data(), dx.data(), n, impl);
  CHECK(max_rel_error(dx, numeric_gradient(silu_f, params), kGradFloor) < kGradTolerance);

  auto tanh_f = [&] {
    std::vector<double> g(n);
    gelu_tanh_forward<double>(x.data(), g.data(), n, impl);
    return dot(g, r);
  };
  dx = poisoned<double>(n);
  gelu_tanh_backward<double>(x.data(), r.data(), dx.data(), n, impl);
  CHECK(max_rel_error(dx, numeric_gradient(tanh_f, params), kGradFloor) < kGradTolerance);
}

TEST_CASE("activations reject a negative size", "[activation]") {
  std::vector<float> v(2);
  CHECK_THROWS_AS(relu_forward<float>(v.data(), v.data(), -1), std::invalid_argument);
  CHECK_THROWS_AS(gelu_backward<float>(v.data(), v.data(), v.data(), -5, Impl::reference),
                  std::invalid_argument);
  CHECK_THROWS_AS(silu_forward<double>(nullptr, nullptr, -1), std::invalid_argument);
}
