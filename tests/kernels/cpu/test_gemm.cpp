// gemm: the fast path (OpenBLAS blocks over OpenMP threads) against the reference loops.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "support/test_util.hpp"

using namespace codistill::kernels::cpu;
using codistill::test::fresh_seed;
using codistill::test::max_rel_error;
using codistill::test::poisoned;
using codistill::test::random_vector;
using codistill::test::tolerance;
using codistill::test::rel_error;

namespace {

// Relative error against the scale of the reference: an element that cancels to ~0 is
// judged against the output's RMS, not against itself.
}  // namespace

TEST_CASE("reference gemm matches a hand-computed product", "[gemm]") {
  // A = [[1,2,3],[4,5,6]] (2x3), B = [[1,0],[0,1],[1,1]] (3x2): A*B = [[4,5],[10,11]].
  const std::vector<double> A{1, 2, 3, 4, 5, 6}, B{1, 0, 0, 1, 1, 1};
  std::vector<double> C{100, 100, 100, 100};
  gemm<double>(false, false, 2, 2, 3, 2.0, A.data(), B.data(), 0.5, C.data(), Impl::reference);
  CHECK(C == std::vector<double>{58, 60, 70, 72});
  // Transposed operands: A^T stored as [3,2], B^T stored as [2,3].
  const std::vector<double> At{1, 4, 2, 5, 3, 6}, Bt{1, 0, 1, 0, 1, 1};
  std::vector<double> D = poisoned<double>(4);
  gemm<double>(true, true, 2, 2, 3, 1.0, At.data(), Bt.data(), 0.0, D.data(), Impl::reference);
  CHECK(D == std::vector<double>{4, 5, 10, 11});
}

TEMPLATE_TEST_CASE("fast gemm matches reference", "[gemm]", float, double) {
  using T = TestType;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  const int threads = GENERATE(1, 2, 3);
  set_num_threads(threads);
  INFO("threads " << threads);
  // Odd sizes, tiny ones, and ones large enough for the threaded split along M or N.
  const auto [M, N, K] = GENERATE(table<int, int, int>({{1, 1, 1},
                                                       {3, 17, 33},
                                                       {17, 3, 5},
                                                       {1, 300, 7},
                                                       {33, 64, 17},
                                                       {257, 31, 129},
                                                       {40, 301, 100},
                                                       {128, 256, 196}}));
  INFO("M " << M << " N " << N << " K " << K);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      INFO("trans_a " << ta << " trans_b " << tb);
      const auto A = random_vector<T>(static_cast<std::size_t>(M) * K, seed);
      const auto B = random_vector<T>(static_cast<std::size_t>(K) * N, seed + 1);
      // beta = 0 must overwrite a poisoned C; beta != 0 must blend a real one.
      auto want = poisoned<T>(static_cast<std::size_t>(M) * N);
      auto got = poisoned<T>(want.size());
      gemm<T>(ta, tb, M, N, K, T(1), A.data(), B.data(), T(0), want.data(), Impl::reference);
      gemm<T>(ta, tb, M, N, K, T(1), A.data(), B.data(), T(0), got.data(), Impl::fast);
      CHECK(rel_error(got, want) < tolerance<T>());

      const auto C0 = random_vector<T>(want.size(), seed + 2);
      want = C0;
      got = C0;
      gemm<T>(ta, tb, M, N, K, T(-0.75), A.data(), B.data(), T(1.5), want.data(), Impl::reference);
      gemm<T>(ta, tb, M, N, K, T(-0.75), A.data(), B.data(), T(1.5), got.data(), Impl::fast);
      CHECK(rel_error(got, want) < tolerance<T>());
    }
  set_num_threads(2);
}

TEMPLATE_TEST_CASE("gemm with K = 0 scales C by beta", "[gemm]", float, double) {
  using T = TestType;
  for (Impl impl : {Impl::reference, Impl::fast}) {
    std::vector<T> C{1, 2, 3, 4, 5, 6};
    gemm<T>(false, false, 2, 3, 0, T(1), nullptr, nullptr, T(2), C.data(), impl);
    CHECK(C == std::vector<T>{2, 4, 6, 8, 10, 12});
    auto Z = poisoned<T>(6);
    gemm<T>(false, false, 2, 3, 0, T(1), nullptr, nullptr, T(0), Z.data(), impl);
    CHECK(Z == std::vector<T>(6, T(0)));
  }
}

TEST_CASE("gemm rejects negative sizes", "[gemm]") {
  std::vector<float> C(4);
  for (Impl impl : {Impl::reference, Impl::fast}) {
    CHECK_THROWS_AS(gemm<float>(false, false, -1, 2, 2, 1.f, C.data(), C.data(), 0.f, C.data(), impl),
                    std::invalid_argument);
    CHECK_THROWS_AS(gemm<float>(false, false, 2, 2, -3, 1.f, C.data(), C.data(), 0.f, C.data(), impl),
                    std::invalid_argument);
  }
}

TEST_CASE("fast gemm is bit-reproducible for a given thread count", "[gemm]") {
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  set_num_threads(2);
  const int M = 96, N = 333, K = 250;
  const auto A = random_vector<float>(M * K, seed), B = random_vector<float>(K * N, seed + 1);
  std::vector<float> C1(M * N), C2(M * N);
  gemm<float>(false, true, M, N, K, 1.f, A.data(), B.data(), 0.f, C1.data());
  gemm<float>(false, true, M, N, K, 1.f, A.data(), B.data(), 0.f, C2.data());
  CHECK(std::memcmp(C1.data(), C2.data(), C1.size() * sizeof(float)) == 0);
}

TEMPLATE_TEST_CASE("gemm_serial honours leading dimensions", "[gemm]", float, double) {
  using T = TestType;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  // Multiply the top-left 3x4 * 4x5 corners of larger row-major arrays into a 3x5 window.
  const int M = 3, N = 5, K = 4, lda = 7, ldb = 9, ldc = 8;
  const auto A = random_vector<T>(M * lda, seed), B = random_vector<T>(K * ldb, seed + 1);
  auto C = poisoned<T>(M * ldc);
  gemm_serial<T>(false, false, M, N, K, T(1), A.data(), lda, B.data(), ldb, T(0), C.data(), ldc);
  double worst = 0;
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int k = 0; k < K; ++k) acc += static_cast<double>(A[m * lda + k]) * B[k * ldb + n];
      worst = std::max(worst, std::abs(C[m * ldc + n] - acc));
    }
    for (int n = N; n < ldc; ++n) CHECK(std::isnan(C[m * ldc + n]));  // outside the window
  }
  CHECK(worst < 1e-5);
}
