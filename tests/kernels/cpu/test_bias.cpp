// Bias broadcasts (rows and NCHW channels) and their gradients.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/bias.hpp"
#include "support/test_util.hpp"

using namespace codistill::kernels::cpu;
using codistill::test::IsaScope;
using codistill::test::fresh_seed;
using codistill::test::max_rel_error;
using codistill::test::numeric_gradient;
using codistill::test::poisoned;
using codistill::test::random_vector;
using codistill::test::kGradFloor;
using codistill::test::kGradTolerance;
using codistill::test::tolerance;
using codistill::test::rel_error;

TEMPLATE_TEST_CASE("fast row bias matches reference", "[bias]", float, double) {
  using T = TestType;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  set_num_threads(GENERATE(1, 2));
  // 1100 columns crosses the fast path's column block; 300 x 257 crosses its thread cutoff.
  const auto [M, N] = GENERATE(table<int, int>({{1, 1}, {3, 17}, {33, 10}, {300, 257}, {45, 1100}}));
  INFO("M " << M << " N " << N);
  const auto y0 = random_vector<T>(M * N, seed), b = random_vector<T>(N, seed + 1);
  auto y_ref = y0, y_fast = y0;
  bias_add_rows<T>(y_ref.data(), b.data(), M, N, Impl::reference);
  bias_add_rows<T>(y_fast.data(), b.data(), M, N, Impl::fast);
  CHECK(rel_error(y_fast, y_ref) < tolerance<T>());
  CHECK(y_ref[N - 1] == y0[N - 1] + b[N - 1]);  // the reference itself adds the right entry

  for (bool acc : {false, true}) {
    INFO("accumulate " << acc);
    const auto start = random_vector<T>(N, seed + 2);
    auto db_ref = acc ? start : poisoned<T>(N), db_fast = acc ? start : poisoned<T>(N);
    bias_grad_rows<T>(y0.data(), db_ref.data(), M, N, acc, Impl::reference);
    bias_grad_rows<T>(y0.data(), db_fast.data(), M, N, acc, Impl::fast);
    CHECK(rel_error(db_fast, db_ref) < tolerance<T>());
  }
}

TEMPLATE_TEST_CASE("fast channel bias matches reference", "[bias]", float, double) {
  using T = TestType;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  set_num_threads(GENERATE(1, 2));
  const auto [B, C, S] = GENERATE(table<int, int, int>({{1, 1, 1}, {3, 5, 17}, {2, 33, 49}, {16, 32, 196}, {7, 1, 3000}}));
  INFO("B " << B << " C " << C << " S " << S);
  const auto y0 = random_vector<T>(B * C * S, seed), b = random_vector<T>(C, seed + 1);
  auto y_ref = y0, y_fast = y0;
  bias_add_channels<T>(y_ref.data(), b.data(), B, C, S, Impl::reference);
  bias_add_channels<T>(y_fast.data(), b.data(), B, C, S, Impl::fast);
  CHECK(rel_error(y_fast, y_ref) < tolerance<T>());
  // Last element of image 0, channel C-1 gets b[C-1].
  CHECK(y_ref[C * S - 1] == y0[C * S - 1] + b[C - 1]);

  for (bool acc : {false, true}) {
    INFO("accumulate " << acc);
    const auto start = random_vector<T>(C, seed + 2);
    auto db_ref = acc ? start : poisoned<T>(C), db_fast = acc ? start : poisoned<T>(C);
    bias_grad_channels<T>(y0.data(), db_ref.data(), B, C, S, acc, Impl::reference);
    bias_grad_channels<T>(y0.data(), db_fast.data(), B, C, S, acc, Impl::fast);
    CHECK(rel_error(db_fast, db_ref) < tolerance<T>());
  }
}

TEST_CASE("bias gradients match finite differences", "[bias][gradcheck]") {
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  const Impl impl = GENERATE(Impl::reference, Impl::fast);
  const int B = 3, C = 4, S = 5;
  auto b = random_vector<double>(C, seed);
  const auto y0 = random_vector<double>(B * C * S, seed + 1), r = random_vector<double>(B * C * S, seed + 2);
  std::vector<double*> params;
  for (auto& v : b) params.push_back(&v);
  // The same B*C*S values seen as a [B*S, C] matrix (rows) and as NCHW planes (channels).
  auto rows_f = [&] {
    auto y = y0;
    bias_add_rows<double>(y.data(), b.data(), B * S, C, impl);
    double s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * r[i];
    return s;
  };
  auto chan_f = [&] {
    auto y = y0;
    bias_add_channels<double>(y.data(), b.data(), B, C, S, impl);
    double s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * r[i];
    return s;
  };
  auto db = poisoned<double>(C);
  bias_grad_rows<double>(r.data(), db.data(), B * S, C, false, impl);
  CHECK(max_rel_error(db, numeric_gradient(rows_f, params), kGradFloor) < kGradTolerance);
  db = poisoned<double>(C);
  bias_grad_channels<double>(r.data(), db.data(), B, C, S, false, impl);
  CHECK(max_rel_error(db, numeric_gradient(chan_f, params), kGradFloor) < kGradTolerance);
}

TEST_CASE("bias ops reject negative sizes", "[bias]") {
  std::vector<float> v(4);
  for (Impl impl : {Impl::reference, Impl::fast}) {
    CHECK_THROWS_AS(bias_add_rows<float>(v.data(), v.data(), -1, 2, impl), std::invalid_argument);
    CHECK_THROWS_AS(bias_grad_channels<float>(v.data(), v.data(), 1, -2, 2, false, impl),
                    std::invalid_argument);
  }
}

// The row bias gradient's loop is compiled per ISA (kernels/cpu/isa.hpp): each copy gives
// the baseline's bits (adds only, each column's rows in order), whatever the column split.
TEMPLATE_TEST_CASE("row bias gradient: every ISA copy and column split gives the same bits", "[bias]", float, double) {
  using T = TestType;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  const auto [M, N] = GENERATE(table<int, int>({{1, 1}, {33, 10}, {128, 256}, {45, 1100}}));
  INFO("M " << M << " N " << N);
  const auto dy = random_vector<T>(M * N, seed), start = random_vector<T>(N, seed + 1);
  for (bool acc : {false, true}) {
    INFO("accumulate " << acc);
    std::vector<std::vector<T>> got;
    for (const char* isa : {"baseline", "avx2", "avx512"}) {
      IsaScope scope(isa);
      auto whole = acc ? start : poisoned<T>(N), split = acc ? start : poisoned<T>(N);
      bias_grad_rows<T>(dy.data(), whole.data(), M, N, acc, Impl::fast);
      // Three uneven column ranges, as threads of a caller's region would take them.
      const int a = N / 3, b = N - N / 5;
      bias_grad_rows_cols<T>(dy.data(), split.data(), M, N, 0, a, acc, chosen_isa());
      bias_grad_rows_cols<T>(dy.data(), split.data(), M, N, a, b, acc, chosen_isa());
      bias_grad_rows_cols<T>(dy.data(), split.data(), M, N, b, N, acc, chosen_isa());
      CHECK(whole == split);
      got.push_back(whole);
    }
    CHECK(got[0] == got[1]);
    CHECK(got[0] == got[2]);
  }
}
