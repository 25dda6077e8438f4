// The fused linear + distillation head on the CPU (kernels/cpu/loss/distill_head.hpp): against
// the unfused path it replaces (linear_forward for the student and each teacher, then
// distill_loss over all N rows, then linear_backward), for several chunk sizes; its
// gradients with respect to the hidden states and the head (weight and bias) against central
// differences of its own loss in double, reference and fast paths; bad labels rejected with
// nothing written. The backend op driver (tests/kernels/ops/cases_head.hpp) holds the fast
// path and the CUDA twin to the reference on many more shapes.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/linear.hpp"
#include "kernels/cpu/loss/distill_head.hpp"
#include "kernels/cpu/loss/distill_loss.hpp"

namespace {

namespace cpu = codistill::kernels::cpu;
using cpu::Impl;

template <class T>
std::vector<T> uniform(std::size_t n, std::uint64_t seed, double a) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-a, a);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(u(gen));
  return v;
}

// A head problem: student h [N, H], W [V, H], b [V]; teachers of their own hidden sizes.
template <class T>
struct Head {
  std::int64_t N, H, V;
  std::vector<T> h, w, b;
  std::vector<std::int64_t> dims;
  std::vector<std::vector<T>> th, tw, tb;
  std::vector<std::int32_t> labels;

  Head(std::int64_t n, std::int64_t hd, std::int64_t v, std::vector<std::int64_t> tdims, std::uint64_t seed)
      : N(n), H(hd), V(v), dims(std::move(tdims)) {
    h = uniform<T>(N * H, seed, 1.0);
    w = uniform<T>(V * H, seed + 1, 3.0 / std::sqrt(double(H)));
    b = uniform<T>(V, seed + 2, 0.5);
    for (std::size_t k = 0; k < dims.size(); ++k) {
      th.push_back(uniform<T>(N * dims[k], seed + 10 + k, 1.0));
      tw.push_back(uniform<T>(V * dims[k], seed + 20 + k, 3.0 / std::sqrt(double(dims[k]))));
      tb.push_back(uniform<T>(V, seed + 30 + k, 0.5));
    }
    std::mt19937_64 gen(seed + 99);
    for (std::int64_t r = 0; r < N; ++r)
      labels.push_back(r % 4 == 2 ? -1 : static_cast<std::int32_t>(gen() % static_cast<std::uint64_t>(V)));
  }
  std::vector<cpu::HeadTeacherPtrs<T>> teachers() const {
    std::vector<cpu::HeadTeacherPtrs<T>> out;
    for (std::size_t k = 0; k < dims.size(); ++k) out.push_back({th[k].data(), tw[k].data(), tb[k].data(), dims[k]});
    return out;
  }
  int K() const { return static_cast<int>(dims.size()); }
};

template <class T>
double max_rel(const std::vector<T>& got, const std::vector<T>& want) {
  double scale = 0, err = 0;
  for (T v : want) scale = std::max(scale, std::abs(double(v)));
  for (std::size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(double(got[i]) - double(want[i])));
  return err / std::max(scale, 1e-300);
}

}  // namespace

TEST_CASE("linear_distill_head equals the unfused linear + distill_loss + linear backward", "[distill_head]") {
  const cpu::DistillLossParams lp{2.0, 0.7, 1.3};
  for (const auto& dims : {std::vector<std::int64_t>{}, std::vector<std::int64_t>{24},
                           std::vector<std::int64_t>{24, 16, 40, 8}}) {
    Head<float> pr(29, 24, 1031, dims, 7 + dims.size());
    const std::int64_t N = pr.N, H = pr.H, V = pr.V;
    const int K = pr.K();
    // The unfused path, fast: the N x V logits of everyone, then the loss, then backward.
    std::vector<float> z(N * V), dh_want(N * H), dw_want(V * H, 0.01f), db_want(V, 0.02f);
    std::vector<std::vector<float>> t(K, std::vector<float>(N * V));
    cpu::linear_forward<float>(pr.h.data(), pr.w.data(), pr.b.data(), z.data(), N, V, H);
    std::vector<const float*> tp;
    for (int k = 0; k < K; ++k) {
      cpu::linear_forward<float>(pr.th[k].data(), pr.tw[k].data(), pr.tb[k].data(), t[k].data(), N, V, pr.dims[k]);
      tp.push_back(t[k].data());
    }
    const auto want = cpu::distill_loss<float>(z.data(), tp.data(), K, pr.labels.data(), z.data(), N, V, lp);
    cpu::linear_backward<float>(pr.h.data(), pr.w.data(), z.data(), dh_want.data(), dw_want.data(), db_want.data(), N,
                                V, H, /*accumulate=*/true);

    for (std::int64_t chunk : {std::int64_t{1}, std::int64_t{5}, std::int64_t{8}, N}) {
      INFO("K=" << K << " chunk=" << chunk);
      cpu::DistillHeadParams p;
      p.loss = lp;
      p.workspace_bytes = static_cast<std::size_t>((K + 1) * chunk * V) * sizeof(float);
      REQUIRE(codistill::kernels::distill_head_chunk_rows(N, V, K, sizeof(float), p.workspace_bytes) == chunk);
      std::vector<float> dh(N * H, NAN), dw(V * H, 0.01f), db(V, 0.02f);
      const auto ts = pr.teachers();
      const auto got = cpu::linear_distill_head<float>(pr.h.data(), pr.w.data(), pr.b.data(), N, H, V, ts.data(), K,
                                                       pr.labels.data(), dh.data(), dw.data(), db.data(), p);
      CHECK(got.rows == want.rows);
      CHECK(got.loss == Approx(want.loss).epsilon(1e-6));
      CHECK(got.ce == Approx(want.ce).epsilon(1e-6));
      CHECK(got.distill == Approx(want.distill).epsilon(1e-6).margin(1e-9));
      CHECK(max_rel(dh, dh_want) <= 1e-5);
      CHECK(max_rel(dw, dw_want) <= 1e-5);
      CHECK(max_rel(db, db_want) <= 1e-5);
    }
  }
}

TEST_CASE("linear_distill_head gradients match central differences (double)", "[distill_head]") {
  for (const Impl impl : {Impl::reference, Impl::fast}) {
    Head<double> pr(6, 5, 23, {5, 3}, 41);
    const std::int64_t N = pr.N, H = pr.H, V = pr.V;
    cpu::DistillHeadParams p;
    p.loss = {2.0, 0.6, 1.1};
    p.workspace_bytes = 3 * 4 * V * sizeof(double);  // chunks of 4 rows: 4 + 2
    const auto ts = pr.teachers();
    auto loss = [&]() {
      return cpu::linear_distill_head<double>(pr.h.data(), pr.w.data(), pr.b.data(), N, H, V, ts.data(), pr.K(),
                                              pr.labels.data(), nullptr, nullptr, nullptr, p, impl)
          .loss;
    };
    std::vector<double> dh(N * H), dw(V * H, 0.0), db(V, 0.0);
    cpu::linear_distill_head<double>(pr.h.data(), pr.w.data(), pr.b.data(), N, H, V, ts.data(), pr.K(),
                                     pr.labels.data(), dh.data(), dw.data(), db.data(), p, impl);
    const double eps = 1e-6;
    auto numeric = [&](double& x) {
      const double x0 = x;
      x = x0 + eps;
      const double up = loss();
      x = x0 - eps;
      const double down = loss();
      x = x0;
      return (up - down) / (2 * eps);
    };
    INFO((impl == Impl::reference ? "reference" : "fast"));
    for (std::size_t i = 0; i < pr.h.size(); ++i) CHECK(dh[i] == Approx(numeric(pr.h[i])).margin(1e-8).epsilon(1e-5));
    for (std::size_t i = 0; i < pr.w.size(); i += 3) CHECK(dw[i] == Approx(numeric(pr.w[i])).margin(1e-8).epsilon(1e-5));
    for (std::size_t i = 0; i < pr.b.size(); ++i) CHECK(db[i] == Approx(numeric(pr.b[i])).margin(1e-8).epsilon(1e-5));
  }
}

TEST_CASE("linear_distill_head rejects a bad label before writing anything", "[distill_head]") {
  Head<float> pr(9, 4, 50, {4}, 5);
  pr.labels[7] = 50;
  const auto ts = pr.teachers();
  for (const Impl impl : {Impl::reference, Impl::fast}) {
    cpu::DistillHeadParams p;
    p.workspace_bytes = 2 * 2 * 50 * sizeof(float);  // chunks of 2 rows: the bad one is in the fourth
    std::vector<float> dh(9 * 4, 3.0f), dw(50 * 4, 3.0f), db(50, 3.0f);
    CHECK_THROWS_WITH(cpu::linear_distill_head<float>(pr.h.data(), pr.w.data(), pr.b.data(), 9, 4, 50, ts.data(), 1,
                                                      pr.labels.data(), dh.data(), dw.data(), db.data(), p, impl),
                      Catch::Matchers::Contains("row 7") && Catch::Matchers::Contains("label 50"));
    CHECK(dh == std::vector<float>(9 * 4, 3.0f));
    CHECK(dw == std::vector<float>(50 * 4, 3.0f));
    CHECK(db == std::vector<float>(50, 3.0f));
  }
  cpu::DistillHeadParams bad_t;
  bad_t.loss.temperature = 0;
  pr.labels[7] = 1;
  CHECK_THROWS_AS(cpu::linear_distill_head<float>(pr.h.data(), pr.w.data(), nullptr, 9, 4, 50, ts.data(), 1,
                                                  pr.labels.data(), nullptr, nullptr, nullptr, bad_t),
                  std::invalid_argument);
}
