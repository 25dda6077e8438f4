// The CUDA fused distillation loss, run from its real source under the SIMT executor with
// the launch shapes a GPU gets, against the CPU reference (kernels/cpu/loss/distill_loss.hpp):
// float32 and bf16, every launch variant (a warp per row; 256-, 512- and 1024-thread
// blocks per row), V from 1 to 131072 (multiples of 4 and not, aligned and misaligned rows),
// K 0-4, T 1/2/4, ignored rows, in place, forward only, bad labels (nothing written) and
// masked (-inf) logits, each under several schedules.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "tests/kernels/cuda_simt/loss_runner.hpp"

namespace {

using namespace codistill;
using namespace codistill::test::simt_kernels;

// A row-major [N, V] problem on the host: student, K teachers, labels.
struct Problem {
  std::int64_t N, V;
  int K;
  std::vector<float> student;
  std::vector<std::vector<float>> teachers;
  std::vector<std::int32_t> labels;
};

Problem make_problem(std::int64_t N, std::int64_t V, int K, std::uint64_t seed,
                     double masked = 0.0) {
  Problem pr{N, V, K, random_floats(N * V, seed, -4.0f, 4.0f), {}, std::vector<std::int32_t>(N)};
  for (int k = 0; k < K; ++k) pr.teachers.push_back(random_floats(N * V, seed + 1 + k, -3.0f, 3.0f));
  std::mt19937_64 rng(seed * 7 + 3);
  for (std::int64_t r = 0; r < N; ++r) {
    pr.labels[r] = rng() % 5 == 0 ? -1 : static_cast<std::int32_t>(rng() % V);
    if (masked <= 0) continue;
    // Mask entries (never the label): in the student and in each teacher, and one teacher
    // row masked everywhere but one entry.
    std::uniform_real_distribution<double> u(0, 1);
    for (std::int64_t j = 0; j < V; ++j) {
      if (j == pr.labels[r]) continue;
      if (u(rng) < masked) pr.student[r * V + j] = -INFINITY;
      for (int k = 0; k < K; ++k)
        if (u(rng) < masked || (r == 0 && k == 0 && j != 0)) pr.teachers[k][r * V + j] = -INFINITY;
    }
  }
  return pr;
}

kernels::DistillLossResult reference(const Problem& pr, const kernels::DistillLossParams& p,
                                     std::vector<float>& grad) {
  std::vector<const float*> tp;
  for (const auto& t : pr.teachers) tp.push_back(t.data());
  grad.assign(pr.N * pr.V, 0.0f);
  return kernels::cpu::distill_loss<float>(pr.student.data(), tp.data(), pr.K, pr.labels.data(),
                                           grad.data(), pr.N, pr.V, p, kernels::cpu::Impl::reference);
}

void check_result(const kernels::DistillLossResult& got, const kernels::DistillLossResult& want,
                  double tol) {
  REQUIRE(got.rows == want.rows);
  CHECK(got.ce == Approx(want.ce).epsilon(tol).margin(tol));
  CHECK(got.distill == Approx(want.distill).epsilon(tol).margin(tol));
  CHECK(got.loss == Approx(want.loss).epsilon(tol).margin(tol));
}

enum class Where { separate, in_place, forward_only };

// float32 through the executor; returns the variant that ran.
shapes::DistillVariant check_f32(const Problem& pr, const kernels::DistillLossParams& p,
                                 const shapes::DeviceProps& props, std::uint64_t seed,
                                 Where where, std::size_t misalign = 0) {
  std::vector<float> want_grad;
  const auto want = reference(pr, p, want_grad);
  simt::DeviceBuffer<float> z(pr.student, misalign), g(pr.student.size(), misalign);
  std::vector<std::unique_ptr<simt::DeviceBuffer<float>>> ts;
  std::vector<const float*> tp;
  for (const auto& t : pr.teachers) {
    ts.push_back(std::make_unique<simt::DeviceBuffer<float>>(t, misalign));
    tp.push_back(ts.back()->data());
  }
  simt::DeviceBuffer<std::int32_t> y(pr.labels);
  float* grad = where == Where::separate ? g.data() : where == Where::in_place ? z.data() : nullptr;
  const auto run = run_loss<float>(z.data(), tp, y.data(), grad, pr.N, pr.V, p, props, seed);
  INFO("N=" << pr.N << " V=" << pr.V << " K=" << pr.K << " T=" << p.temperature << " variant "
            << run.variant.threads << "/" << run.variant.group << "/" << run.variant.vec
            << " grid " << run.launch.grid.x << " seed " << seed);
  REQUIRE(run.bad_row == static_cast<std::uint64_t>(pr.N));
  check_result(run.result, want, 2e-5);
  if (where == Where::forward_only) {
    REQUIRE(z.download() == pr.student);  // untouched
    for (float v : g.download()) REQUIRE(std::isnan(v));
  } else {
    CHECK(scaled_error(where == Where::separate ? g.download() : z.download(), want_grad) < 2e-5);
  }
  return run.variant;
}

}  // namespace

TEST_CASE("simt: the fused loss matches the CPU reference for every variant and V", "[simt][loss]") {
  std::set<std::tuple<int, int, int>> variants_seen;
  const shapes::DeviceProps props[] = {kH100, kT4, kTiny};
  int i = 0;
  for (const std::int64_t V : {1, 3, 4, 5, 31, 64, 1000, 2048, 2049, 4099, 8192, 10001, 12288,
                               16384, 16385, 40000, 131072}) {
    const std::int64_t N = V <= 2048 ? 37 : V <= 16384 ? 5 : 2;
    for (const int K : {0, 1, 2, 4}) {
      if (V >= 40000 && K == 2) continue;  // time: the big rows run K = 0, 1, 4
      const double T = (i % 3 == 0) ? 1.0 : (i % 3 == 1) ? 2.0 : 4.0;
      const kernels::DistillLossParams p{T, 0.7, 0.3 + 0.1 * K};
      const auto pr = make_problem(N, V, K, 100 + i);
      const auto v = check_f32(pr, p, props[i % 3], kSeeds[i % 4], Where::separate);
      variants_seen.insert({v.threads, v.group, v.vec});
      ++i;
    }
  }
  // Every shape distill_loss_variant can choose ran, vectorized and scalar.
  for (const int vec : {1, 4}) {
    CHECK(variants_seen.count({256, 32, vec}));
    CHECK(variants_seen.count({256, 256, vec}));
    CHECK(variants_seen.count({512, 512, vec}));
    CHECK(variants_seen.count({1024, 1024, vec}));
  }
}

TEST_CASE("simt: the fused loss under every schedule seed, in place, forward only, misaligned",
          "[simt][loss]") {
  for (const std::uint64_t seed : kSeeds) {
    for (const std::int64_t V : {100, 4096, 20000}) {
      const std::int64_t N = V <= 2048 ? 21 : 3;
      const kernels::DistillLossParams p{2.0, 0.5, 0.5};
      const auto pr = make_problem(N, V, 3, seed * 11 + V);
      check_f32(pr, p, kTiny, seed, Where::in_place);
      check_f32(pr, p, kH100, seed, Where::forward_only);
      // Rows 4 bytes off a 16-byte boundary: the scalar path although V % 4 == 0.
      const auto v = check_f32(pr, p, kT4, seed, Where::separate, 4);
      CHECK(v.vec == 1);
    }
  }
}

TEST_CASE("simt: masked (-inf) logits give the reference's finite results", "[simt][loss]") {
  for (const std::int64_t V : {64, 3000, 20000}) {
    for (const int K : {1, 3}) {
      const auto pr = make_problem(V <= 2048 ? 16 : 3, V, K, 900 + V + K, 0.3);
      check_f32(pr, {2.0, 0.6, 0.4}, kH100, kSeeds[K], Where::separate);
      check_f32(pr, {1.0, 0.6, 0.4}, kTiny, kSeeds[(K + 1) % 4], Where::in_place);
    }
  }
}

TEST_CASE("simt: every row ignored gives a zero gradient and no terms", "[simt][loss]") {
  for (const std::int64_t V : {10, 5000}) {
    auto pr = make_problem(6, V, 2, 77);
    for (auto& y : pr.labels) y = -1;
    simt::DeviceBuffer<float> z(pr.student), g(pr.student.size()), t0(pr.teachers[0]),
        t1(pr.teachers[1]);
    simt::DeviceBuffer<std::int32_t> y(pr.labels);
    const auto run = run_loss<float>(z.data(), {t0.data(), t1.data()}, y.data(), g.data(), 6, V,
                                     {2.0, 1.0, 1.0}, kH100, 3);
    REQUIRE(run.result.rows == 0);
    REQUIRE(run.result.loss == 0.0);
    for (float v : g.download()) REQUIRE(v == 0.0f);
  }
}

TEST_CASE("simt: a bad label writes nothing and names the first bad row", "[simt][loss]") {
  for (const std::int64_t V : {50, 9000}) {
    for (const std::int32_t bad : {static_cast<std::int32_t>(V), -2, 1 << 30}) {
      auto pr = make_problem(9, V, 1, 31);
      pr.labels[4] = bad;
      pr.labels[7] = static_cast<std::int32_t>(V + 5);
      simt::DeviceBuffer<float> z(pr.student), g(pr.student.size()), t(pr.teachers[0]);
      simt::DeviceBuffer<std::int32_t> y(pr.labels);
      for (const bool in_place : {false, true}) {
        const auto run = run_loss<float>(z.data(), {t.data()}, y.data(),
                                         in_place ? z.data() : g.data(), 9, V, {1.0, 1.0, 1.0},
                                         kT4, 5);
        REQUIRE(run.bad_row == 4);
        for (float v : g.download()) REQUIRE(std::isnan(v));  // the poison is untouched
        REQUIRE(z.download() == pr.student);
      }
    }
  }
}

TEST_CASE("simt: bf16 logits match the CPU reference on the widened values", "[simt][loss]") {
  int i = 0;
  for (const std::int64_t V : {7, 512, 2048, 6000, 16384, 33000}) {
    for (const int K : {0, 1, 4}) {
      const std::int64_t N = V <= 2048 ? 19 : 3;
      auto pr = make_problem(N, V, K, 500 + i);
      // The reference sees exactly the bf16 values the kernel reads.
      const auto round = [](std::vector<float>& v) {
        for (auto& x : v) x = __bfloat162float(__float2bfloat16_rn(x));
      };
      round(pr.student);
      for (auto& t : pr.teachers) round(t);
      const kernels::DistillLossParams p{i % 2 ? 2.0 : 1.0, 0.5, 1.0};
      std::vector<float> want_grad;
      const auto want = reference(pr, p, want_grad);
      const auto to_bf16 = [](const std::vector<float>& v) {
        std::vector<__nv_bfloat16> b(v.size());
        for (std::size_t j = 0; j < v.size(); ++j) b[j] = __float2bfloat16_rn(v[j]);
        return b;
      };
      simt::DeviceBuffer<__nv_bfloat16> z(to_bf16(pr.student)), g(pr.student.size());
      std::vector<std::unique_ptr<simt::DeviceBuffer<__nv_bfloat16>>> ts;
      std::vector<const __nv_bfloat16*> tp;
      for (const auto& t : pr.teachers) {
        ts.push_back(std::make_unique<simt::DeviceBuffer<__nv_bfloat16>>(to_bf16(t)));
        tp.push_back(ts.back()->data());
      }
      simt::DeviceBuffer<std::int32_t> y(pr.labels);
      const bool in_place = i % 2 == 1;
      const auto run = run_loss<__nv_bfloat16>(z.data(), tp, y.data(), in_place ? z.data() : g.data(),
                                               N, V, p, i % 2 ? kTiny : kH100, kSeeds[i % 4]);
      INFO("bf16 N=" << N << " V=" << V << " K=" << K << " variant " << run.variant.threads << "/"
                     << run.variant.vec);
      check_result(run.result, want, 2e-5);  // float32 math inside: only the inputs are bf16
      std::vector<float> got;
      for (const auto b : (in_place ? z : g).download()) got.push_back(__bfloat162float(b));
      CHECK(scaled_error(got, want_grad) < 1e-2);
      ++i;
    }
  }
}
