// The cuBLAS call plans of the fused linear + distillation head
// (kernels/cuda/plans/distill_head_plan.hpp), executed chunk by chunk by OpenBLAS in
// column-major mode exactly as distill_head.cu passes them to cublasGemmEx (operands offset
// to the chunk's rows), against the unchunked row-major products (naive loops in double):
// the student's and each teacher's logits (teachers with their own hidden sizes), dh and
// dW accumulated over the chunks; chunk sizes that do not divide N, one row, all of N.
#include <catch2/catch.hpp>
#include <cblas.h>

#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/cuda/plans/distill_head_plan.hpp"
#include "kernels/ops.hpp"

namespace {

using namespace codistill::kernels::cuda;

std::vector<float> random(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (auto& e : v) e = d(rng);
  return v;
}

CBLAS_TRANSPOSE blas(plans::Trans t) { return t == plans::Trans::transpose ? CblasTrans : CblasNoTrans; }

// Operands by role, as pointers into the caller's buffers (offset to the chunk's rows).
struct Ptrs {
  const float *x = nullptr, *w = nullptr, *dy = nullptr;
  float *y = nullptr, *dx = nullptr, *dw = nullptr;
  const float* in(plans::Operand o) const {
    return o == plans::Operand::x ? x : o == plans::Operand::w ? w : dy;
  }
  float* out(plans::Operand o) const { return o == plans::Operand::y ? y : o == plans::Operand::dx ? dx : dw; }
};

void execute(const plans::GemmPlan& p, const Ptrs& b) {
  cblas_sgemm(CblasColMajor, blas(p.transa), blas(p.transb), static_cast<int>(p.m), static_cast<int>(p.n),
              static_cast<int>(p.k), p.alpha, b.in(p.a), static_cast<int>(p.lda), b.in(p.b),
              static_cast<int>(p.ldb), p.beta, b.out(p.c), static_cast<int>(p.ldc));
}

// x [rows, D] (row-major, starting at x), w [V, D]: want[r, j] = sum_i x[r, i] w[j, i].
double dot(const float* a, const float* b, std::int64_t D) {
  double acc = 0;
  for (std::int64_t i = 0; i < D; ++i) acc += double(a[i]) * b[i];
  return acc;
}

}  // namespace

TEST_CASE("cuBLAS plans of the fused distillation head compute the unchunked products chunk by chunk",
          "[plans][distill_head]") {
  struct Case {
    std::int64_t N, V, H, chunk;
    std::vector<std::int64_t> dims;  // teachers' hidden sizes
  };
  const Case cases[] = {{7, 5, 3, 3, {}}, {10, 33, 16, 4, {8}}, {9, 17, 5, 1, {5, 11, 2, 7}},
                        {6, 12, 9, 6, {4}}, {13, 40, 24, 5, {24, 31}}};
  std::uint64_t seed = 100;
  for (const Case& cs : cases) {
    const std::int64_t N = cs.N, V = cs.V, H = cs.H;
    INFO("N=" << N << " V=" << V << " H=" << H << " chunk=" << cs.chunk << " teachers=" << cs.dims.size());
    const auto h = random(N * H, seed++), w = random(V * H, seed++), dz = random(N * V, seed++);
    const auto dw0 = random(V * H, seed++);
    std::vector<std::vector<float>> th, tw;
    for (std::int64_t D : cs.dims) th.push_back(random(N * D, seed++)), tw.push_back(random(V * D, seed++));
    std::vector<float> dh(N * H, 7.0f), dw = dw0;  // beta = 0 must ignore dh's 7s

    std::int64_t covered = 0;
    for (const auto& c : plans::head_chunks(N, cs.chunk)) {
      REQUIRE(c.row0 == covered);  // the chunks tile [0, N) in order
      REQUIRE(c.rows >= 1);
      REQUIRE(c.rows <= cs.chunk);
      covered += c.rows;
      const auto pl = plans::distill_head_plans(c, V, H, cs.dims);
      REQUIRE(pl.teacher_logits.size() == cs.dims.size());
      // Logits of the chunk's rows into a fresh workspace slot.
      std::vector<float> z(c.rows * V, 7.0f);
      Ptrs f;
      f.x = h.data() + plans::operand_offset(c, H), f.w = w.data(), f.y = z.data();
      execute(pl.student_logits, f);
      for (std::int64_t r = 0; r < c.rows; ++r)
        for (std::int64_t j = 0; j < V; ++j)
          REQUIRE(z[r * V + j] == Approx(dot(&h[(c.row0 + r) * H], &w[j * H], H)).margin(1e-5 * H));
      for (std::size_t k = 0; k < cs.dims.size(); ++k) {
        const std::int64_t D = cs.dims[k];
        std::vector<float> t(c.rows * V, 7.0f);
        Ptrs g;
        g.x = th[k].data() + plans::operand_offset(c, D), g.w = tw[k].data(), g.y = t.data();
        execute(pl.teacher_logits[k], g);
        for (std::int64_t r = 0; r < c.rows; ++r)
          for (std::int64_t j = 0; j < V; ++j)
            REQUIRE(t[r * V + j] == Approx(dot(&th[k][(c.row0 + r) * D], &tw[k][j * D], D)).margin(1e-5 * D));
      }
      // The gradient of the chunk's logits (a slot of its own, as the head's workspace).
      std::vector<float> dzc(dz.begin() + c.row0 * V, dz.begin() + (c.row0 + c.rows) * V);
      Ptrs b;
      b.dy = dzc.data(), b.w = w.data(), b.x = h.data() + plans::operand_offset(c, H);
      b.dx = dh.data() + plans::operand_offset(c, H), b.dw = dw.data();
      execute(pl.dhidden, b);
      execute(pl.dweight, b);
    }
    REQUIRE(covered == N);
    // dh = dz W over the whole batch; dW = dW0 + dz^T h.
    for (std::int64_t r = 0; r < N; ++r)
      for (std::int64_t i = 0; i < H; ++i) {
        double want = 0;
        for (std::int64_t j = 0; j < V; ++j) want += double(dz[r * V + j]) * w[j * H + i];
        REQUIRE(dh[r * H + i] == Approx(want).margin(1e-5 * V));
      }
    for (std::int64_t j = 0; j < V; ++j)
      for (std::int64_t i = 0; i < H; ++i) {
        double want = dw0[j * H + i];
        for (std::int64_t r = 0; r < N; ++r) want += double(dz[r * V + j]) * h[r * H + i];
        REQUIRE(dw[j * H + i] == Approx(want).margin(1e-5 * N));
      }
  }
}

TEST_CASE("a bf16-weight teacher's logits plan reads the weight whole and rounds only the chunk's rows",
          "[plans][distill_head][bf16]") {
  // distill_head.cu hands a teacher weight held as bf16 to run_gemm_plan_bf16_weight with the
  // chunk's teacher-logits plan: A must be that weight as stored (all V x H_k elements), B the
  // chunk's rows of h_k (rounded into scratch: rows x H_k elements, none past the chunk).
  for (const auto& [N, V, chunk] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{13, 257, 4}, {10, 33, 3},
                                   {64, 8192, 64}}) {
    for (const std::int64_t D : {5, 8, 24}) {
      INFO("N=" << N << " V=" << V << " chunk=" << chunk << " H_k=" << D);
      for (const auto& c : plans::head_chunks(N, chunk)) {
        const auto pl = plans::distill_head_plans(c, V, 16, {D});
        const plans::GemmPlan& p = pl.teacher_logits.at(0);
        CHECK(p.a == plans::Operand::w);
        CHECK(p.b == plans::Operand::x);
        CHECK(p.c == plans::Operand::y);
        CHECK(plans::a_span(p) == V * D);
        CHECK(plans::b_span(p) == c.rows * D);
        CHECK(plans::operand_offset(c, D) + plans::b_span(p) <= N * D);
      }
    }
  }
}

TEST_CASE("the head's chunk rule keeps (K + 1) x chunk x V elements within the workspace", "[plans][distill_head]") {
  using codistill::kernels::distill_head_chunk_rows;
  CHECK(distill_head_chunk_rows(4096, 32768, 4, 4, std::size_t{64} << 20) == 102);
  CHECK(distill_head_chunk_rows(4096, 131072, 1, 4, std::size_t{64} << 20) == 64);
  CHECK(distill_head_chunk_rows(10, 100, 0, 4, std::size_t{1} << 30) == 10);  // at most N
  CHECK(distill_head_chunk_rows(10, 131072, 4, 4, 1000) == 1);                // at least one row
  for (int K : {0, 1, 4})
    for (std::int64_t V : {1, 33, 32768, 131072}) {
      const std::size_t budget = std::size_t{3} << 20;
      const std::int64_t rows = distill_head_chunk_rows(1 << 20, V, K, 4, budget);
      CHECK(static_cast<std::size_t>((K + 1) * rows * V * 4) <= budget);
      CHECK(static_cast<std::size_t>((K + 1) * (rows + 1) * V * 4) > budget);  // the most that fit
    }
}
