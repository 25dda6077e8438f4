// The fused distillation loss on the CPU: fast path vs reference on fresh random inputs
// (every ISA variant this CPU can run), finite differences in double, an independent
// formula written out here, in-place use, argument errors and edge cases.
#include <cfloat>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/loss/distill_loss.hpp"
#include "support/test_util.hpp"

using codistill::kernels::cpu::distill_loss;
using codistill::kernels::cpu::DistillLossParams;
using codistill::kernels::cpu::DistillLossResult;
using codistill::kernels::cpu::Impl;
using namespace codistill::test;

namespace {

template <class T>
struct Problem {
  std::int64_t N, V;
  int K;
  std::vector<T> student;
  std::vector<std::vector<T>> teachers;
  std::vector<std::int32_t> labels;
  std::vector<const T*> tptr;

  // Logits in [-spread, spread] with a per-row spread between 1 and 12 (peaked and flat
  // rows); about one row in five ignored, but row 0 always counted.
  Problem(std::int64_t n, std::int64_t v, int k, std::uint64_t seed) : N(n), V(v), K(k) {
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<double> u(-1, 1), spread(1, 12);
    auto fill = [&](std::vector<T>& x) {
      x.resize(N * V);
      for (std::int64_t r = 0; r < N; ++r) {
        const double s = spread(gen);
        for (std::int64_t j = 0; j < V; ++j) x[r * V + j] = static_cast<T>(s * u(gen));
      }
    };
    fill(student);
    teachers.resize(K);
    for (auto& t : teachers) fill(t);
    for (auto& t : teachers) tptr.push_back(t.data());
    std::uniform_int_distribution<std::int32_t> label(0, static_cast<std::int32_t>(V - 1));
    for (std::int64_t r = 0; r < N; ++r) labels.push_back(r > 0 && u(gen) > 0.6 ? -1 : label(gen));
  }

  DistillLossResult run(T* grad, const DistillLossParams& p, Impl impl) const {
    return distill_loss(student.data(), tptr.data(), K, labels.data(), grad, N, V, p, impl);
  }
};


double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-6); }

// Gradient compare: relative, with a floor at 1% of the largest reference entry (entries
// far below it are differences of probabilities, exact only to float rounding of those).
template <class T>
double grad_error(const std::vector<T>& got, const std::vector<T>& want) {
  double big = 0;
  for (T w : want) big = std::max(big, std::abs(static_cast<double>(w)));
  return max_rel_error(got, want, std::max(big * 1e-2, 1e-30));
}

}  // namespace

TEST_CASE("distill_loss fast matches reference (float, every ISA variant)", "[distill_loss]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
      {1, 1}, {3, 7}, {64, 33}, {17, 1000}, {5, 1031}, {2, 32768}};
  for (const char* isa : {"", "avx2", "baseline"}) {
    IsaScope scope(isa);
    for (int K = 0; K <= 4; ++K)
      for (double temp : {1.0, 2.0, 4.0})
        for (auto [N, V] : shapes) {
          INFO("isa '" << isa << "' K " << K << " T " << temp << " N " << N << " V " << V);
          Problem<float> pb(N, V, K, seed + 7919 * K + N * 31 + V);
          const DistillLossParams p{temp, 0.7, 1.3};
          auto g_ref = poisoned<float>(N * V), g_fast = poisoned<float>(N * V);
          const auto ref = pb.run(g_ref.data(), p, Impl::reference);
          const auto fast = pb.run(g_fast.data(), p, Impl::fast);
          CHECK(fast.rows == ref.rows);
          CHECK(rel(fast.loss, ref.loss) < 1e-5);
          CHECK(rel(fast.ce, ref.ce) < 1e-5);
          CHECK(std::abs(fast.distill - ref.distill) < 1e-5 * std::max(1.0, ref.distill));
          CHECK(grad_error(g_fast, g_ref) < tolerance<float>());
          // Forward only gives the same numbers.
          const auto fwd = pb.run(nullptr, p, Impl::fast);
          CHECK(rel(fwd.loss, fast.loss) < 1e-6);
        }
  }
}

TEST_CASE("distill_loss fast matches reference (double)", "[distill_loss]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  for (int K = 0; K <= 4; ++K)
    for (double temp : {1.0, 2.0, 4.0}) {
      INFO("K " << K << " T " << temp);
      Problem<double> pb(9, 2053, K, seed + K);
      const DistillLossParams p{temp, 1.1, 0.9};
      auto g_ref = poisoned<double>(9 * 2053), g_fast = poisoned<double>(9 * 2053);
      const auto ref = pb.run(g_ref.data(), p, Impl::reference);
      const auto fast = pb.run(g_fast.data(), p, Impl::fast);
      CHECK(rel(fast.loss, ref.loss) < 1e-12);
      CHECK(std::abs(fast.distill - ref.distill) < 1e-12 * std::max(1.0, ref.distill));
      CHECK(grad_error(g_fast, g_ref) < tolerance<double>());
    }
}

TEST_CASE("distill_loss gradient matches finite differences", "[distill_loss]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  for (Impl impl : {Impl::reference, Impl::fast})
    for (int K = 1; K <= 4; ++K)
      for (double temp : {1.0, 2.0, 4.0}) {
        INFO("impl " << (impl == Impl::fast ? "fast" : "reference") << " K " << K << " T " << temp);
        Problem<double> pb(4, 9, K, seed + 13 * K);
        pb.labels[2] = -1;
        const DistillLossParams p{temp, 0.6, 1.4};
        std::vector<double> grad(pb.N * pb.V);
        pb.run(grad.data(), p, impl);
        std::vector<double*> params;
        for (auto& x : pb.student) params.push_back(&x);
        const auto numeric =
            numeric_gradient([&] { return pb.run(nullptr, p, impl).loss; }, params);
        CHECK(max_rel_error(grad, numeric, kGradFloor) < kGradTolerance);
        for (std::int64_t j = 0; j < pb.V; ++j) CHECK(grad[2 * pb.V + j] == 0.0);  // ignored row
      }
}

TEST_CASE("distill_loss agrees with the formula written out by hand", "[distill_loss]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  const int K = 3;
  const double temp = 2.5, a = 0.8, h = 1.2;
  Problem<double> pb(6, 11, K, seed);
  pb.labels[1] = -1;
  // loss = h CE(y, softmax z) + a T^2 KL(q || softmax(z/T)), q the mean teacher softmax(t/T).
  auto softmax = [](std::vector<double> x, double scale) {
    double s = 0;
    for (auto& v : x) s += (v = std::exp(v / scale));
    for (auto& v : x) v /= s;
    return x;
  };
  double ce = 0, kl = 0;
  int rows = 0;
  std::vector<double> want(pb.N * pb.V, 0.0);
  for (std::int64_t r = 0; r < pb.N; ++r) {
    if (pb.labels[r] < 0) continue;
    ++rows;
    auto row = [&](const std::vector<double>& x) {
      return std::vector<double>(x.begin() + r * pb.V, x.begin() + (r + 1) * pb.V);
    };
    const auto p1 = softmax(row(pb.student), 1.0), pt = softmax(row(pb.student), temp);
    std::vector<double> q(pb.V, 0.0);
    for (const auto& t : pb.teachers) {
      const auto qk = softmax(row(t), temp);
      for (std::int64_t j = 0; j < pb.V; ++j) q[j] += qk[j] / K;
    }
    ce += -std::log(p1[pb.labels[r]]);
    for (std::int64_t j = 0; j < pb.V; ++j) {
      kl += temp * temp * q[j] * std::log(q[j] / pt[j]);
      want[r * pb.V + j] = h * (p1[j] - (j == pb.labels[r])) + a * temp * (pt[j] - q[j]);
    }
  }
  for (auto& g : want) g /= rows;
  const DistillLossParams p{temp, a, h};
  for (Impl impl : {Impl::reference, Impl::fast}) {
    auto grad = poisoned<double>(pb.N * pb.V);
    const auto res = pb.run(grad.data(), p, impl);
    CHECK(res.rows == rows);
    CHECK(rel(res.ce, ce / rows) < 1e-12);
    CHECK(rel(res.distill, kl / rows) < 1e-10);
    CHECK(rel(res.loss, h * ce / rows + a * kl / rows) < 1e-12);
    CHECK(max_rel_error(grad, want, 1e-9) < 1e-9);
  }
}

TEST_CASE("distill_loss in place equals out of place", "[distill_loss]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  for (Impl impl : {Impl::reference, Impl::fast})
    for (int K : {0, 1, 3}) {
      INFO("K " << K);
      Problem<float> pb(13, 1500, K, seed + K);
      const DistillLossParams p{2.0, 1.0, 1.0};
      auto out = poisoned<float>(pb.N * pb.V);
      const auto a = pb.run(out.data(), p, impl);
      auto z = pb.student;  // the same logits, overwritten by their gradient
      const auto b = distill_loss(z.data(), pb.tptr.data(), K, pb.labels.data(), z.data(), pb.N,
                                  pb.V, p, impl);
      CHECK(a.loss == b.loss);
      CHECK(z == out);
    }
}

TEST_CASE("distill_loss rejects bad labels and arguments before writing", "[distill_loss]") {
  Problem<float> pb(8, 10, 2, fresh_seed());
  const DistillLossParams p{2.0, 1.0, 1.0};
  for (Impl impl : {Impl::reference, Impl::fast}) {
    for (std::int32_t bad : {10, -2, 1 << 30}) {
      pb.labels[5] = bad;
      std::vector<float> grad(pb.N * pb.V, 42.0f);
      CHECK_THROWS_AS(pb.run(grad.data(), p, impl), std::out_of_range);
      CHECK_THROWS_WITH(pb.run(grad.data(), p, impl),
                        Catch::Matchers::Contains("row 5") &&
                            Catch::Matchers::Contains("label " + std::to_string(bad)));
      CHECK(grad == std::vector<float>(pb.N * pb.V, 42.0f));
    }
    pb.labels[5] = 0;
    auto call = [&](double temp, std::int64_t N, std::int64_t V, int K) {
      return distill_loss(pb.student.data(), pb.tptr.data(), K, pb.labels.data(),
                          static_cast<float*>(nullptr), N, V, DistillLossParams{temp, 1, 1}, impl);
    };
    CHECK_THROWS_AS(call(0.0, 8, 10, 2), std::invalid_argument);
    CHECK_THROWS_AS(call(-1.0, 8, 10, 2), std::invalid_argument);
    CHECK_THROWS_AS(call(2.0, 0, 10, 2), std::invalid_argument);
    CHECK_THROWS_AS(call(2.0, 8, 0, 2), std::invalid_argument);
    CHECK_THROWS_AS(call(2.0, 8, 10, -1), std::invalid_argument);
    CHECK_NOTHROW(call(2.0, 8, 10, 2));
  }
  IsaScope bogus("sse9");  // an unknown ISA override is an error that lists the valid ones
  CHECK_THROWS_WITH(pb.run(nullptr, p, Impl::fast), Catch::Matchers::Contains("avx2"));
}

TEST_CASE("distill_loss with every row ignored is zero", "[distill_loss]") {
  Problem<float> pb(5, 20, 2, fresh_seed());
  std::fill(pb.labels.begin(), pb.labels.end(), -1);
  for (Impl impl : {Impl::reference, Impl::fast}) {
    auto grad = poisoned<float>(pb.N * pb.V);
    const auto res = pb.run(grad.data(), DistillLossParams{2.0, 1.0, 1.0}, impl);
    CHECK(res.rows == 0);
    CHECK(res.loss == 0.0);
    CHECK(res.ce == 0.0);
    CHECK(res.distill == 0.0);
    CHECK(grad == std::vector<float>(pb.N * pb.V, 0.0f));
  }
}

TEST_CASE("distill_loss with one of the two weights zero", "[distill_loss]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Problem<double> pb(7, 300, 2, seed);
  Problem<double> no_teacher = pb;
  no_teacher.K = 0;
  for (Impl impl : {Impl::reference, Impl::fast}) {
    const std::size_t n = pb.N * pb.V;
    // a = 0: the hard term alone, as with no teacher; distill is still reported.
    auto g_a0 = poisoned<double>(n), g_k0 = poisoned<double>(n);
    const auto a0 = pb.run(g_a0.data(), DistillLossParams{2.0, 0.0, 1.0}, impl);
    const auto k0 = no_teacher.run(g_k0.data(), DistillLossParams{2.0, 1.0, 1.0}, impl);
    CHECK(rel(a0.loss, k0.loss) < 1e-14);
    CHECK(k0.distill == 0.0);
    CHECK(a0.distill > 0.0);
    CHECK(max_rel_error(g_a0, g_k0, 1e-9) < 1e-12);
    // h = 0: the soft term alone; the gradient of each counted row sums to zero and the
    // loss is a * distill.
    auto g_h0 = poisoned<double>(n);
    const auto h0 = pb.run(g_h0.data(), DistillLossParams{2.0, 0.5, 0.0}, impl);
    CHECK(rel(h0.loss, 0.5 * h0.distill) < 1e-14);
    CHECK(h0.ce > 0.0);
    for (std::int64_t r = 0; r < pb.N; ++r) {
      double s = 0, mag = 0;
      for (std::int64_t j = 0; j < pb.V; ++j) {
        s += g_h0[r * pb.V + j];
        mag += std::abs(g_h0[r * pb.V + j]);
      }
      CHECK(std::abs(s) <= 1e-12);
      CHECK((pb.labels[r] < 0 ? mag == 0.0 : mag > 0.0));
    }
  }
}

TEST_CASE("distill_loss is deterministic, whatever the thread count", "[distill_loss]") {
  Problem<float> pb(33, 3001, 2, fresh_seed());
  const DistillLossParams p{2.0, 1.0, 1.0};
  auto g1 = poisoned<float>(pb.N * pb.V), g2 = poisoned<float>(pb.N * pb.V),
       g3 = poisoned<float>(pb.N * pb.V);
  const int threads = codistill::kernels::cpu::num_threads();
  codistill::kernels::cpu::set_num_threads(2);
  const auto a = pb.run(g1.data(), p, Impl::fast);
  const auto b = pb.run(g2.data(), p, Impl::fast);
  codistill::kernels::cpu::set_num_threads(1);
  const auto c = pb.run(g3.data(), p, Impl::fast);
  codistill::kernels::cpu::set_num_threads(threads);
  CHECK(a.loss == b.loss);
  CHECK(a.loss == c.loss);
  CHECK(g1 == g2);
  CHECK(g1 == g3);
}

namespace {

// Masks entries of the logits (never the label) one way, the test case below says which:
// 'a', 'b', 'c' or 'p'.
template <class T>
void mask_logits(Problem<T>& pb, char mode, float value) {
  const std::int64_t V = pb.V;
  for (std::int64_t r = 0; r < pb.N; ++r)
    for (std::int64_t j = 0; j < V; ++j) {
      if (j == pb.labels[r]) continue;
      const std::int64_t i = r * V + j;
      if (mode == 'p') {
        if (r % 2 || j < V - std::max<std::int64_t>(1, V / 8)) continue;
        pb.student[i] = value;
        for (auto& t : pb.teachers) t[i] = value;
        continue;
      }
      if ((j * 7 + r) % 3 != 0) continue;
      if (mode == 'a') {
        pb.student[i] = value;
        for (auto& t : pb.teachers) t[i] = value;
      } else if (mode == 'b') {
        pb.teachers[j % pb.K][i] = value;
      } else if (j % 2) {
        pb.student[i] = value;
      }
    }
  // The pattern above can miss every counted row (labels on its entries, the other
  // rows ignored): row 0 is always counted, so one entry beside its label makes the
  // KL infinite whatever the draw.
  if (mode == 'c') pb.student[(pb.labels[0] + 1) % V] = -INFINITY;
}

// The fast path against the reference on masked logits, with and without the gradient and
// in place; mode 'c' must give an infinite KL in all of them.
template <class T>
void check_masked(const Problem<T>& pb, char mode, const DistillLossParams& p) {
  const std::int64_t V = pb.V;
  auto g_ref = poisoned<T>(pb.N * V), g_fast = poisoned<T>(pb.N * V);
  const auto ref = pb.run(g_ref.data(), p, Impl::reference);
  const auto fast = pb.run(g_fast.data(), p, Impl::fast);
  const auto forward = pb.run(nullptr, p, Impl::fast);
  REQUIRE_FALSE(std::isnan(ref.loss));
  REQUIRE_FALSE(std::isnan(fast.loss));
  REQUIRE_FALSE(std::isnan(forward.loss));
  if (mode == 'c') {
    CHECK(std::isinf(ref.distill));
    CHECK(std::isinf(fast.distill));
    CHECK(std::isinf(forward.distill));
  } else {
    CHECK(std::isfinite(fast.loss));
    CHECK(rel(fast.loss, ref.loss) < 1e-5);
    CHECK(std::abs(fast.distill - ref.distill) < 1e-5 * std::max(1.0, ref.distill));
    CHECK(rel(forward.loss, ref.loss) < 1e-5);
  }
  for (std::size_t i = 0; i < g_fast.size(); ++i) REQUIRE(std::isfinite(g_fast[i]));
  CHECK(grad_error(g_fast, g_ref) < tolerance<T>());
  // In place (the gradient over the logits): the same loops, z read before g is written.
  auto z = pb.student;
  const auto in_place = distill_loss(z.data(), pb.tptr.data(), pb.K, pb.labels.data(),
                                     z.data(), pb.N, V, p, Impl::fast);
  if (mode == 'c') CHECK(std::isinf(in_place.distill));
  else CHECK(in_place.loss == fast.loss);
  CHECK(z == g_fast);
}

}  // namespace

TEST_CASE("distill_loss with masked (-inf) logits: the fast path defines 0 log 0 = 0",
          "[distill_loss]") {
  // Masked vocabulary entries, as language models pad them: (a) the same entries masked in
  // the student and every teacher (finite loss), (b) entries masked in a teacher only
  // (finite), (c) an entry masked in the student where a teacher puts mass (KL = +inf, in
  // both paths), (p) a padded vocabulary in every other row: the last V / 8 entries masked
  // in the student and every teacher of rows 0 and 2, rows 1 and 3 unmasked: a row of 1031
  // mixes chunks of 256 with and without masks, and the fast path's choice of the select
  // (K = 1: from a row's first chunk whose plain sum is NaN on) must not leak between rows.
  // Never the label. Every ISA variant; K = 1 and K >= 2 take different paths; with and
  // without the gradient (other loops); T = 1 (one softmax of the student shared); also
  // double on the default ISA. Also masks of -FLT_MAX (finfo.min) at T = 0.5, where the
  // scaled float logits overflow to -inf (modes a, b and p: the reference, in double, does
  // not overflow, so c is finite there).
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  struct Masking {
    float value;
    double temperature;
  };
  for (const char* isa : {"", "avx2", "baseline"})
    for (const Masking m : {Masking{-INFINITY, 2.0}, Masking{-INFINITY, 1.0}, Masking{-FLT_MAX, 0.5}}) {
      IsaScope scope(isa);
      for (const int K : {1, 2, 4})
        for (const std::int64_t V : {7, 64, 1031})
          for (const char mode : {'a', 'b', 'c', 'p'}) {
            if (m.value != -INFINITY && mode == 'c') continue;
            INFO("isa '" << isa << "' mask " << m.value << " T " << m.temperature << " K " << K
                         << " V " << V << " mode " << mode);
            const DistillLossParams p{m.temperature, 0.7, 1.3};
            Problem<float> pb(4, V, K, seed + 31 * K + V + mode);
            mask_logits(pb, mode, m.value);
            check_masked(pb, mode, p);
            if (*isa) continue;
            INFO("double");
            Problem<double> pd(4, V, K, seed + 31 * K + V + mode);
            mask_logits(pd, mode, m.value);
            check_masked(pd, mode, p);
          }
    }
}
