// linear: fast vs reference, finite-difference gradients, accumulate and null-pointer paths.
#include <catch2/catch.hpp>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/linear.hpp"
#include "support/test_util.hpp"

using namespace codistill::kernels::cpu;
using codistill::test::fresh_seed;
using codistill::test::max_rel_error;
using codistill::test::numeric_gradient;
using codistill::test::poisoned;
using codistill::test::random_vector;
using codistill::test::kGradFloor;
using codistill::test::kGradTolerance;
using codistill::test::tolerance;
using codistill::test::rel_error;

namespace {

std::vector<double*> pointers(std::vector<double>& v) {
  std::vector<double*> p;
  for (auto& x : v) p.push_back(&x);
  return p;
}

}  // namespace

TEMPLATE_TEST_CASE("fast linear matches reference", "[linear]", float, double) {
  using T = TestType;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  set_num_threads(2);
  const auto [M, N, K] = GENERATE(table<int, int, int>(
      {{1, 1, 1}, {3, 17, 33}, {17, 10, 3}, {128, 256, 784}, {33, 128, 300}, {7, 1, 129}}));
  INFO("batch " << M << " out " << N << " in " << K);
  const bool with_bias = GENERATE(true, false);
  INFO("bias " << with_bias);
  const auto x = random_vector<T>(M * K, seed), w = random_vector<T>(N * K, seed + 1);
  const auto b = random_vector<T>(N, seed + 2), dy = random_vector<T>(M * N, seed + 3);
  const T* bp = with_bias ? b.data() : nullptr;

  auto y_ref = poisoned<T>(M * N), y_fast = poisoned<T>(M * N);
  linear_forward<T>(x.data(), w.data(), bp, y_ref.data(), M, N, K, Impl::reference);
  linear_forward<T>(x.data(), w.data(), bp, y_fast.data(), M, N, K, Impl::fast);
  CHECK(rel_error(y_fast, y_ref) < tolerance<T>());

  auto dx_ref = poisoned<T>(M * K), dx_fast = poisoned<T>(M * K);
  auto dw_ref = poisoned<T>(N * K), dw_fast = poisoned<T>(N * K);
  auto db_ref = poisoned<T>(N), db_fast = poisoned<T>(N);
  T* dbr = with_bias ? db_ref.data() : nullptr;
  T* dbf = with_bias ? db_fast.data() : nullptr;
  linear_backward<T>(x.data(), w.data(), dy.data(), dx_ref.data(), dw_ref.data(), dbr, M, N, K,
                     false, Impl::reference);
  linear_backward<T>(x.data(), w.data(), dy.data(), dx_fast.data(), dw_fast.data(), dbf, M, N, K,
                     false, Impl::fast);
  CHECK(rel_error(dx_fast, dx_ref) < tolerance<T>());
  CHECK(rel_error(dw_fast, dw_ref) < tolerance<T>());
  if (with_bias) CHECK(rel_error(db_fast, db_ref) < tolerance<T>());
  else CHECK(std::isnan(db_fast[0]));  // untouched when db is null
}

TEST_CASE("linear gradients match finite differences", "[linear][gradcheck]") {
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  const Impl impl = GENERATE(Impl::reference, Impl::fast);
  INFO("impl " << (impl == Impl::fast ? "fast" : "reference"));
  const int M = 3, N = 4, K = 5;
  auto x = random_vector<double>(M * K, seed), w = random_vector<double>(N * K, seed + 1);
  auto b = random_vector<double>(N, seed + 2);
  const auto r = random_vector<double>(M * N, seed + 3);
  // Scalar objective f = sum(y * r), so df/dy = r.
  auto f = [&] {
    std::vector<double> y(M * N);
    linear_forward<double>(x.data(), w.data(), b.data(), y.data(), M, N, K, impl);
    double s = 0;
    for (int i = 0; i < M * N; ++i) s += y[i] * r[i];
    return s;
  };
  auto dx = poisoned<double>(M * K), dw = poisoned<double>(N * K), db = poisoned<double>(N);
  linear_backward<double>(x.data(), w.data(), r.data(), dx.data(), dw.data(), db.data(), M, N, K,
                          false, impl);
  CHECK(max_rel_error(dx, numeric_gradient(f, pointers(x)), kGradFloor) < kGradTolerance);
  CHECK(max_rel_error(dw, numeric_gradient(f, pointers(w)), kGradFloor) < kGradTolerance);
  CHECK(max_rel_error(db, numeric_gradient(f, pointers(b)), kGradFloor) < kGradTolerance);
}

TEMPLATE_TEST_CASE("linear backward accumulates into dw and db, never into dx", "[linear]", float,
                   double) {
  using T = TestType;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  const Impl impl = GENERATE(Impl::reference, Impl::fast);
  const int M = 9, N = 6, K = 11;
  const auto x = random_vector<T>(M * K, seed), w = random_vector<T>(N * K, seed + 1);
  const auto dy = random_vector<T>(M * N, seed + 2);
  auto dw0 = poisoned<T>(N * K), db0 = poisoned<T>(N);
  linear_backward<T>(x.data(), w.data(), dy.data(), nullptr, dw0.data(), db0.data(), M, N, K,
                     false, impl);
  const auto base_w = random_vector<T>(N * K, seed + 3), base_b = random_vector<T>(N, seed + 4);
  auto dw = base_w, db = base_b;
  auto dx = random_vector<T>(M * K, seed + 5);  // must be overwritten, not added to
  auto dx_fresh = poisoned<T>(M * K);
  linear_backward<T>(x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), M, N, K, true,
                     impl);
  linear_backward<T>(x.data(), w.data(), dy.data(), dx_fresh.data(), dw0.data(), db0.data(), M, N,
                     K, false, impl);
  std::vector<T> want_w(N * K), want_b(N);
  for (int i = 0; i < N * K; ++i) want_w[i] = base_w[i] + dw0[i];
  for (int i = 0; i < N; ++i) want_b[i] = base_b[i] + db0[i];
  CHECK(rel_error(dw, want_w) < tolerance<T>());
  CHECK(rel_error(db, want_b) < tolerance<T>());
  CHECK(rel_error(dx, dx_fresh) < tolerance<T>());
}

TEST_CASE("linear rejects bad sizes", "[linear]") {
  std::vector<float> buf(16);
  for (Impl impl : {Impl::reference, Impl::fast}) {
    CHECK_THROWS_AS(linear_forward<float>(buf.data(), buf.data(), nullptr, buf.data(), 2, 0, 2, impl),
                    std::invalid_argument);
    CHECK_THROWS_AS(linear_forward<float>(buf.data(), buf.data(), nullptr, buf.data(), -1, 2, 2, impl),
                    std::invalid_argument);
    CHECK_THROWS_AS(linear_backward<float>(buf.data(), buf.data(), buf.data(), nullptr, buf.data(),
                                           nullptr, 2, 2, 0, false, impl),
                    std::invalid_argument);
  }
}
