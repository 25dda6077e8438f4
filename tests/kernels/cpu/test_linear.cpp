// linear: fast vs reference, finite-difference gradients, accumulate and null-pointer paths.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/impl.hpp"
#include "kernels/cpu/linear.hpp"
#include "kernels/tensor.hpp"
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

// linear_backward_relu (the fast path's fused backward: one parallel region) computes the
// bits of the ops it replaces run one after the other: relu_backward, then linear_backward's
// GEMMs and bias sum. Shapes: fmnist_mlp's three layers, odd sizes, a one-row batch, an
// empty batch; with and without relu, dx, db; accumulating and overwriting; 1 and 2 threads.
TEMPLATE_TEST_CASE("fused linear + relu backward equals the separate ops bit for bit", "[linear]", float, double) {
  using T = TestType;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  const int threads = GENERATE(1, 2);
  set_num_threads(threads);
  struct Shape {
    std::int64_t M, N, K;
  };
  for (const Shape s : {Shape{128, 256, 784}, Shape{128, 256, 256}, Shape{128, 10, 256}, Shape{7, 13, 33},
                        Shape{1, 5, 3}, Shape{300, 3, 1000}, Shape{0, 4, 6}})
    for (const bool relu : {true, false})
      for (const bool with_dx : {true, false})
        for (const bool accumulate : {true, false}) {
          const std::int64_t M = s.M, N = s.N, K = s.K;
          INFO("threads " << threads << " M " << M << " N " << N << " K " << K << " relu " << relu << " dx "
                          << with_dx << " accumulate " << accumulate);
          const auto x = random_vector<T>(M * K, seed), w = random_vector<T>(N * K, seed + 1);
          const auto dy = random_vector<T>(M * N, seed + 2);
          auto y = random_vector<T>(M * N, seed + 3);
          for (auto& v : y) v = v > T(0.2) ? v : T(0);  // a relu output: a third of it zeros
          const auto dw0 = random_vector<T>(N * K, seed + 4), db0 = random_vector<T>(N, seed + 5);
          // the separate ops
          auto g = poisoned<T>(M * N), dx_a = poisoned<T>(M * K);
          auto dw_a = dw0, db_a = db0;
          if (relu && M > 0) relu_backward<T>(y.data(), dy.data(), g.data(), M * N);
          linear_backward<T>(x.data(), w.data(), relu ? g.data() : dy.data(), with_dx ? dx_a.data() : nullptr,
                             dw_a.data(), db_a.data(), M, N, K, accumulate);
          // fused
          auto dpre = poisoned<T>(M * N), dx_b = poisoned<T>(M * K);
          auto dw_b = dw0, db_b = db0;
          linear_backward_relu<T>(x.data(), w.data(), dy.data(), relu ? y.data() : nullptr, dpre.data(),
                                  with_dx ? dx_b.data() : nullptr, dw_b.data(), db_b.data(), M, N, K, accumulate);
          CHECK(dw_a == dw_b);
          CHECK(db_a == db_b);
          if (with_dx) CHECK(dx_a == dx_b);
          if (relu) CHECK(g == dpre);
        }
  set_num_threads(2);
}

// The fast forward's relu (inside oneDNN's matmul kernel on the CPU backend) gives the bits
// of relu_forward's `v > 0 ? v : 0` on NaN pre-activations (0, not NaN), zeros and signs.
// (A -0 pre-activation cannot come out of the kernel's sum, which starts at +0.)
TEST_CASE("the CPU backend's linear + relu forward maps NaN and -0 pre-activations as relu does", "[linear]") {
  namespace k = codistill::kernels;
  k::Backend& cpu = k::backend_for(k::DeviceKind::cpu);
  const auto q = cpu.make_queue(k::Device::cpu(), {});
  // Row m of x is (v_m, 0, ..., 0) and row n of w (u_n, 1, ..., 1): pre-activation v_m u_n.
  const std::int64_t M = 33, N = 40, K = 16;
  k::Tensor x = k::Tensor::empty({M, K}), w = k::Tensor::empty({N, K}), y = k::Tensor::empty({M, N});
  std::fill(x.data<float>(), x.data<float>() + M * K, 0.0f);
  std::fill(w.data<float>(), w.data<float>() + N * K, 1.0f);
  for (std::int64_t m = 0; m < M; ++m) x.data<float>()[m * K] = m % 3 == 0 ? -0.0f : static_cast<float>(m) - 16;
  // Columns: a NaN weight, a zero weight (pre-activation +-0), negative, positive.
  for (std::int64_t n = 0; n < N; ++n)
    w.data<float>()[n * K] = n % 4 == 0 ? NAN : n % 4 == 1 ? 0.0f : (n % 4 == 2 ? -1.5f : 0.75f);
  std::fill(y.data<float>(), y.data<float>() + M * N, 123.0f);
  cpu.linear_forward(x, w, nullptr, y, k::Activation::relu, nullptr, *q);
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      const float pre = x.data<float>()[m * K] * w.data<float>()[n * K];
      const float want = pre > 0 ? pre : 0.0f;
      const float got = y.data<float>()[m * N + n];
      INFO("m " << m << " n " << n << " pre " << pre << " got " << got);
      REQUIRE(got == want);
      REQUIRE(std::signbit(got) == std::signbit(want));
    }
}
