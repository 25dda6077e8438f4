// bfloat16 on the CPU (kernels/cpu/bf16.hpp): the rounding rule (nearest, ties to even, on
// the bit pattern: subnormals kept, overflow to infinity, NaN kept quiet), the vectorized
// array forms against the scalar rule, and the bf16 GEMM engine (both kernels: oneDNN's
// bf16 matmul and the widened float32 one) against the double reference run on the same
// bf16-rounded operands: tight bounds, which a GEMM that skipped the rounding (float32
// operands) exceeds.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#include "kernels/cpu/bf16.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/isa.hpp"
#include "support/test_util.hpp"

using namespace codistill::kernels::cpu;
using codistill::test::fresh_seed;
using codistill::test::random_vector;
using codistill::test::rel_error;

namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// C = op(A) op(B) in double on the values bf16 holds (plus C when accumulating).
std::vector<double> reference(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K,
                              const std::vector<float>& A, const std::vector<float>& B, bool acc,
                              const std::vector<float>& C0, bool round) {
  auto r = [&](float v) { return static_cast<double>(round ? bf16_rounded(v) : v); };
  std::vector<double> C(static_cast<std::size_t>(M * N));
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      double s = acc ? C0[static_cast<std::size_t>(m * N + n)] : 0.0;
      for (std::int64_t k = 0; k < K; ++k)
        s += r(A[static_cast<std::size_t>(ta ? k * M + m : m * K + k)]) *
             r(B[static_cast<std::size_t>(tb ? n * K + k : k * N + n)]);
      C[static_cast<std::size_t>(m * N + n)] = s;
    }
  return C;
}

}  // namespace

TEST_CASE("bf16 rounding: nearest, ties to even, on the bit pattern", "[bf16]") {
  CHECK(bf16_round(1.0f) == 0x3f80);
  CHECK(bf16_round(-2.0f) == 0xc000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: the tie goes to the even one (1).
  CHECK(bf16_round(from_bits(0x3f808000u)) == 0x3f80);
  // 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  CHECK(bf16_round(from_bits(0x3f818000u)) == 0x3f82);
  // Just above and below a tie: to the nearest.
  CHECK(bf16_round(from_bits(0x3f808001u)) == 0x3f81);
  CHECK(bf16_round(from_bits(0x3f807fffu)) == 0x3f80);
  CHECK(bf16_rounded(0.1f) == from_bits(0x3dcd0000u));  // 0x3dcccccd rounds up
}

TEST_CASE("bf16 rounding: infinities, overflow, NaN, signed zero, subnormals", "[bf16]") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(bf16_round(inf) == 0x7f80);
  CHECK(bf16_round(-inf) == 0xff80);
  // The largest float rounds past the largest bf16 (0x7f7f): infinity, as IEEE says.
  CHECK(bf16_round(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(bf16_round(from_bits(0x7f7f7fffu)) == 0x7f7f);  // just below the halfway point: stays finite
  // NaN stays NaN, quiet, sign kept, even a signalling NaN whose payload lies in the low bits
  // (a plain truncation would make it an infinity).
  const std::uint16_t q = bf16_round(std::numeric_limits<float>::quiet_NaN());
  CHECK(std::isnan(bf16_to_float(q)));
  const std::uint16_t s = bf16_round(from_bits(0x7f800001u));
  CHECK(std::isnan(bf16_to_float(s)));
  CHECK((s & 0x40u) != 0);
  CHECK(bf16_round(from_bits(0xff800001u)) >> 15 == 1u);
  CHECK(bf16_round(-0.0f) == 0x8000);
  // Subnormals round as subnormals (no flush to zero): 2^-130 is 0x00040000, exact in bf16;
  // the smallest float subnormal rounds to zero, 0x00008000 (half of bf16's smallest) ties to
  // even (zero), 0x00018000 ties up to 0x0002.
  CHECK(bf16_round(from_bits(0x00040000u)) == 0x0004);
  CHECK(bf16_round(from_bits(0x00000001u)) == 0x0000);
  CHECK(bf16_round(from_bits(0x00008000u)) == 0x0000);
  CHECK(bf16_round(from_bits(0x00018000u)) == 0x0002);
  CHECK(bf16_round(from_bits(0x8000c000u)) == 0x8001);
  CHECK(bf16_to_float(0x0001) == std::ldexp(1.0f, -133));
}

TEST_CASE("bf16 rounding of arrays (vectorized, threaded) follows the scalar rule", "[bf16]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  // Random bit patterns cover every class (NaNs, infinities, subnormals, ties) in bulk;
  // 200003 elements: the threaded path and a tail that is no multiple of a vector.
  std::vector<float> x(200003);
  std::uint64_t z = seed;
  for (float& v : x) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    v = from_bits(static_cast<std::uint32_t>(z >> 32));
  }
  x[5] = from_bits(0x3f808000u), x[6] = from_bits(0x7f800001u), x[7] = from_bits(0x00018000u);
  std::vector<std::uint16_t> y(x.size(), 0xdead);
  round_to_bf16(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  std::size_t bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) bad += y[i] != bf16_round(x[i]);
  CHECK(bad == 0);
  // The float32-valued form and the widening agree with the bits, NaNs included.
  std::vector<float> v(x.size(), 7.0f), back(x.size(), 7.0f);
  round_values_to_bf16(x.data(), v.data(), static_cast<std::int64_t>(x.size()));
  widen_bf16(y.data(), back.data(), static_cast<std::int64_t>(x.size()));
  std::size_t bad_values = 0, bad_widened = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::uint32_t a, b, c;
    std::memcpy(&a, &v[i], 4);
    std::memcpy(&b, &back[i], 4);
    const float want = bf16_to_float(bf16_round(x[i]));
    std::memcpy(&c, &want, 4);
    bad_values += a != c;
    bad_widened += b != c;
  }
  CHECK(bad_values == 0);
  CHECK(bad_widened == 0);
}

TEST_CASE("bf16 gemm kernel: the CPU rule, CODISTILL_BF16_GEMM overrides it, bad values are refused", "[bf16]") {
  const char* old = std::getenv("CODISTILL_BF16_GEMM");
  const std::string saved = old ? old : "";
  unsetenv("CODISTILL_BF16_GEMM");
  CHECK(default_bf16_kernel() == (has_amx_bf16() || amd_avx512_bf16() ? Bf16Kernel::onednn : Bf16Kernel::widened));
  setenv("CODISTILL_BF16_GEMM", "onednn", 1);
  CHECK(default_bf16_kernel() == Bf16Kernel::onednn);
  setenv("CODISTILL_BF16_GEMM", "widened", 1);
  CHECK(default_bf16_kernel() == Bf16Kernel::widened);
  CHECK(Bf16Gemm().kernel() == Bf16Kernel::widened);
  setenv("CODISTILL_BF16_GEMM", "amx", 1);
  CHECK_THROWS_WITH(default_bf16_kernel(), Catch::Contains("onednn, widened"));
  if (old)
    setenv("CODISTILL_BF16_GEMM", saved.c_str(), 1);
  else
    unsetenv("CODISTILL_BF16_GEMM");
}

TEST_CASE("bf16 gemm: float32 accumulation of bf16-rounded operands, every layout", "[bf16][gemm]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  for (Bf16Kernel kernel : {Bf16Kernel::onednn, Bf16Kernel::widened}) {
  INFO("kernel " << bf16_kernel_name(kernel));
  Bf16Gemm engine(kernel);
  using Shape = std::tuple<std::int64_t, std::int64_t, std::int64_t>;
  int i = 0;
  for (auto [M, N, K] : {Shape{1, 1, 1}, Shape{7, 13, 33}, Shape{64, 96, 128}, Shape{130, 17, 300}, Shape{5, 1000, 64}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool acc : {false, true}) {
          INFO("M=" << M << " N=" << N << " K=" << K << " ta=" << ta << " tb=" << tb << " acc=" << acc);
          const std::uint64_t s = seed + static_cast<std::uint64_t>(++i) * 7;
          auto A = random_vector<float>(static_cast<std::size_t>(M * K), s);
          auto B = random_vector<float>(static_cast<std::size_t>(K * N), s + 1);
          auto C = random_vector<float>(static_cast<std::size_t>(M * N), s + 2);
          const auto want = reference(ta, tb, M, N, K, A, B, acc, C, true);
          if (!acc) std::fill(C.begin(), C.end(), std::numeric_limits<float>::quiet_NaN());  // overwritten
          engine.gemm(ta, tb, M, N, K, A.data(), B.data(), acc, C.data());
          const std::vector<double> got(C.begin(), C.end());
          // Only float32 summation order separates the two: far below a bf16 ulp (2^-8).
          CHECK(rel_error(got, want) <= 2e-5);
          // The same product on unrounded operands is a bf16 rounding away: the bound above
          // would catch an engine that skipped the rounding (K > 8: enough terms to show it).
          if (K > 8 && !acc) CHECK(rel_error(got, reference(ta, tb, M, N, K, A, B, acc, C, false)) > 2e-4);
        }
  CHECK_FALSE(engine.implementation().empty());
  }
}

TEST_CASE("bf16 gemm: an operand rounded once serves two products, as a gradient does", "[bf16][gemm]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  const std::int64_t M = 37, N = 29, K = 45;  // dy [M, N], w [N, K], x [M, K]
  const auto dy = random_vector<float>(static_cast<std::size_t>(M * N), seed);
  const auto w = random_vector<float>(static_cast<std::size_t>(N * K), seed + 1);
  const auto x = random_vector<float>(static_cast<std::size_t>(M * K), seed + 2);
  for (Bf16Kernel kernel : {Bf16Kernel::onednn, Bf16Kernel::widened}) {
    INFO("kernel " << bf16_kernel_name(kernel));
    Bf16Gemm engine(kernel);
    const Bf16Operand g = engine.round_operand(dy.data(), M * N);
    std::vector<float> dx(static_cast<std::size_t>(M * K)), dw(static_cast<std::size_t>(N * K), 0.5f);
    const std::vector<float> dw0 = dw;
    engine.gemm(false, false, M, K, N, g, w.data(), false, dx.data());  // dx = dy w
    engine.gemm(true, false, N, K, M, g, x.data(), true, dw.data());    // dw += dy^T x
    CHECK(rel_error(std::vector<double>(dx.begin(), dx.end()), reference(false, false, M, K, N, dy, w, false, {}, true)) <= 2e-5);
    CHECK(rel_error(std::vector<double>(dw.begin(), dw.end()), reference(true, false, N, K, M, dy, x, true, dw0, true)) <= 2e-5);
    // An operand rounded by the other kernel is refused, not misread.
    Bf16Gemm other(kernel == Bf16Kernel::onednn ? Bf16Kernel::widened : Bf16Kernel::onednn);
    CHECK_THROWS_AS(other.gemm(false, false, M, K, N, g, w.data(), false, dx.data()), std::invalid_argument);
  }
}

TEST_CASE("bf16 linear forward: bias and relu in the matmul, frozen weights rounded and packed once", "[bf16][gemm]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  using Shape = std::tuple<std::int64_t, std::int64_t, std::int64_t>;
  int i = 0;
  for (Bf16Kernel kernel : {Bf16Kernel::onednn, Bf16Kernel::widened})
  // 1100 rows of w: several panels of the widened kernel, the last one short.
  for (const Shape& shape : {Shape{1, 1, 1}, Shape{7, 13, 33}, Shape{128, 256, 784}, Shape{5, 10, 256}, Shape{130, 17, 300},
                             Shape{64, 1100, 96}})
    for (bool bias : {false, true})
      for (bool relu : {false, true})
        for (bool frozen : {false, true}) {
          // Plain variables, not a structured binding: clang 14 cannot capture those in a lambda.
          const std::int64_t M = std::get<0>(shape), N = std::get<1>(shape), K = std::get<2>(shape);
          INFO(bf16_kernel_name(kernel) << " M=" << M << " N=" << N << " K=" << K << " bias=" << bias << " relu=" << relu
                                        << " frozen=" << frozen);
          const std::uint64_t s = seed + static_cast<std::uint64_t>(++i) * 7;
          const auto x = random_vector<float>(static_cast<std::size_t>(M * K), s);
          auto w = random_vector<float>(static_cast<std::size_t>(N * K), s + 1);
          const auto b = random_vector<float>(static_cast<std::size_t>(N), s + 2);
          auto expected = [&] {  // x w^T (+ b), relu, in double on the bf16 values
            auto want = reference(false, true, M, N, K, x, w, false, {}, true);
            for (std::int64_t m = 0; m < M; ++m)
              for (std::int64_t n = 0; n < N; ++n) {
                double& v = want[static_cast<std::size_t>(m * N + n)];
                if (bias) v += b[static_cast<std::size_t>(n)];
                if (relu) v = v > 0 ? v : 0;
              }
            return want;
          };
          Bf16Gemm engine(kernel);
          std::vector<float> y(static_cast<std::size_t>(M * N), std::numeric_limits<float>::quiet_NaN());
          engine.linear_forward(x.data(), w.data(), bias ? b.data() : nullptr, y.data(), M, N, K, relu, frozen);
          CHECK(rel_error(std::vector<double>(y.begin(), y.end()), expected()) <= 2e-5);
          if (relu) CHECK(std::all_of(y.begin(), y.end(), [](float v) { return v >= 0; }));
          // Frozen weights are read once: new values at the same address are not seen (the
          // contract's other side). Unfrozen, every call reads them.
          const std::vector<float> first = y;
          for (float& v : w) v = -2 * v + 0.25f;
          std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
          engine.linear_forward(x.data(), w.data(), bias ? b.data() : nullptr, y.data(), M, N, K, relu, frozen);
          if (frozen)
            CHECK(y == first);
          else
            CHECK(rel_error(std::vector<double>(y.begin(), y.end()), expected()) <= 2e-5);
          // Another weight array of the same shape is packed on its own.
          if (frozen) {
            const auto w2 = random_vector<float>(w.size(), s + 3);
            w = w2;  // `expected` reads w
            std::vector<float> y2(y.size());
            engine.linear_forward(x.data(), w2.data(), bias ? b.data() : nullptr, y2.data(), M, N, K, relu, true);
            CHECK(rel_error(std::vector<double>(y2.begin(), y2.end()), expected()) <= 2e-5);
          }
        }
  for (Bf16Kernel kernel : {Bf16Kernel::onednn, Bf16Kernel::widened}) {
    // one frozen weight array read by batches of several sizes (training and evaluation
    // rows): the layouts the kernels ask for may differ, each is packed and kept
    Bf16Gemm engine(kernel);
    const std::int64_t N = 64, K = 300;
    const auto w = random_vector<float>(static_cast<std::size_t>(N * K), seed + 1000);
    for (int round = 0; round < 2; ++round)
      for (std::int64_t M : {std::int64_t{128}, std::int64_t{1}, std::int64_t{37}}) {
        INFO("round " << round << " M=" << M);
        const auto x = random_vector<float>(static_cast<std::size_t>(M * K), seed + 2000 + static_cast<std::uint64_t>(M));
        std::vector<float> y(static_cast<std::size_t>(M * N));
        engine.linear_forward(x.data(), w.data(), nullptr, y.data(), M, N, K, false, true);
        CHECK(rel_error(std::vector<double>(y.begin(), y.end()), reference(false, true, M, N, K, x, w, false, {}, true)) <=
              2e-5);
      }
  }
  Bf16Gemm engine;
  float v = 1;
  CHECK_THROWS_AS(engine.linear_forward(&v, &v, nullptr, &v, 1, 0, 1, false, true), std::invalid_argument);
}

TEST_CASE("bf16 linear forward, widened: float32, frozen and bf16 weights give the same bits", "[bf16][gemm]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  // A teacher's weights held as bf16 and the same weights frozen or rounded per call must
  // teach alike: the three forms widen the same values into the same panels.
  for (auto [M, N, K] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{33, 1100, 96}, {1, 7, 5}, {256, 768, 768}}) {
    INFO("M=" << M << " N=" << N << " K=" << K);
    const auto x = random_vector<float>(static_cast<std::size_t>(M * K), seed);
    const auto w = random_vector<float>(static_cast<std::size_t>(N * K), seed + 1);
    const auto b = random_vector<float>(static_cast<std::size_t>(N), seed + 2);
    std::vector<std::uint16_t> bits(w.size());
    round_to_bf16(w.data(), bits.data(), static_cast<std::int64_t>(w.size()));
    Bf16Gemm engine(Bf16Kernel::widened);
    std::vector<float> y1(static_cast<std::size_t>(M * N)), y2(y1.size()), y3(y1.size());
    engine.linear_forward(x.data(), w.data(), b.data(), y1.data(), M, N, K, true, false);
    engine.linear_forward(x.data(), w.data(), b.data(), y2.data(), M, N, K, true, true);
    engine.linear_forward(x.data(), bits.data(), b.data(), y3.data(), M, N, K, true);
    CHECK(y1 == y2);
    CHECK(y1 == y3);
    CHECK(engine.implementation() == "widened:f32 sgemm");
  }
}

TEST_CASE("bf16 gemm: an empty sum writes zeros or leaves C, empty outputs are untouched", "[bf16][gemm]") {
  for (Bf16Kernel kernel : {Bf16Kernel::onednn, Bf16Kernel::widened}) {
  Bf16Gemm engine(kernel);
  std::vector<float> C(6, 3.0f);
  engine.gemm(false, false, 2, 3, 0, static_cast<const float*>(nullptr), nullptr, true, C.data());
  CHECK(C == std::vector<float>(6, 3.0f));
  engine.gemm(false, false, 2, 3, 0, static_cast<const float*>(nullptr), nullptr, false, C.data());
  CHECK(C == std::vector<float>(6, 0.0f));
  engine.gemm(false, false, 0, 3, 4, static_cast<const float*>(nullptr), nullptr, false, nullptr);
  CHECK_THROWS_AS(engine.gemm(false, false, -1, 3, 4, static_cast<const float*>(nullptr), nullptr, false, nullptr), std::invalid_argument);
  }
}

TEST_CASE("gemm_compute without an engine is the float32 gemm", "[bf16][gemm]") {
  const auto A = random_vector<float>(12, 1), B = random_vector<float>(20, 2);
  std::vector<float> C1(15), C2(15);
  gemm_compute<float>(nullptr, false, false, 3, 5, 4, A.data(), B.data(), false, C1.data());
  gemm<float>(false, false, 3, 5, 4, 1.0f, A.data(), B.data(), 0.0f, C2.data());
  CHECK(C1 == C2);
}
