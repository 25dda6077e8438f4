// The cuBLAS call plans of the causal attention core (kernels/cuda/plans/attention_plan.hpp),
// executed by OpenBLAS in column-major mode exactly as attention.cu passes them to
// cublasGemmStridedBatchedEx, against the row-major products per (sequence, head) they stand
// for (naive loops in double), on shapes batched along heads and along sequences; and the
// views of every call checked against cuBLAS's leading-dimension rules and their buffers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "tests/kernels/cuda_plans/attention_plan_runner.hpp"

namespace {

using namespace codistill;
using namespace codistill::test::attention_plans;
using plans::AttnBuffer;
using kernels::AttentionShape;

std::vector<float> random(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& e : v) e = d(rng);
  return v;
}

void require_close(const std::vector<float>& got, const std::vector<double>& want, std::int64_t terms) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    REQUIRE(got[i] == Approx(want[i]).margin(1e-5 * static_cast<double>(terms)).epsilon(1e-5));
}

// Index helpers into the row-major layouts of AttentionShape.
struct Idx {
  const AttentionShape& s;
  std::int64_t T() const { return s.seq; }
  std::int64_t D() const { return s.d_model(); }
  // q, k, v (part 0, 1, 2) of token t of sequence b, head h, channel c, in qkv / dqkv
  std::size_t qkv(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t c, int part) const {
    return static_cast<std::size_t>((b * T() + t) * 3 * D() + part * D() + h * s.head_dim + c);
  }
  std::size_t y(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t c) const {
    return static_cast<std::size_t>((b * T() + t) * D() + h * s.head_dim + c);
  }
  std::size_t p(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return static_cast<std::size_t>(((b * s.heads + h) * T() + i) * T() + j);
  }
};

const AttentionShape kShapes[] = {{1, 1, 1, 1}, {2, 1, 2, 4}, {2, 7, 2, 3}, {3, 7, 1, 5},
                                  {1, 16, 4, 8}, {2, 33, 3, 17}, {5, 9, 2, 3}, {4, 6, 4, 2}};

}  // namespace

TEST_CASE("cuBLAS plans of causal attention compute the per-head row-major products", "[plans][attention]") {
  std::uint64_t seed = 11;
  for (const AttentionShape& s : kShapes) {
    INFO("B=" << s.batch << " T=" << s.seq << " H=" << s.heads << " hd=" << s.head_dim);
    const Idx ix{s};
    const std::int64_t B = s.batch, T = s.seq, H = s.heads, hd = s.head_dim;
    const double scale = s.scale();
    auto qkv = random(buffer_size(s, AttnBuffer::qkv), seed++), dy = random(buffer_size(s, AttnBuffer::dy), seed++);
    auto P = random(buffer_size(s, AttnBuffer::probs), seed++), dS = random(buffer_size(s, AttnBuffer::scratch), seed++);
    // Outputs hold garbage: beta = 0 must ignore it.
    std::vector<float> S(P.size(), 7.0f), y(dy.size(), 7.0f), dP(P.size(), 7.0f), dqkv(qkv.size(), 7.0f);

    // Forward products: S (into a buffer of its own so that P stays the input of y = P v).
    const auto fwd = plans::attention_forward_plans(s);
    execute(fwd.scores, {qkv.data(), y.data(), dy.data(), S.data(), nullptr, nullptr});
    execute(fwd.values, {qkv.data(), y.data(), dy.data(), P.data(), nullptr, nullptr});
    std::vector<double> wS(S.size()), wy(y.size());
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t i = 0; i < T; ++i) {
          for (std::int64_t j = 0; j < T; ++j) {
            double acc = 0;
            for (std::int64_t c = 0; c < hd; ++c) acc += double(qkv[ix.qkv(b, i, h, c, 0)]) * qkv[ix.qkv(b, j, h, c, 1)];
            wS[ix.p(b, h, i, j)] = scale * acc;
          }
          for (std::int64_t c = 0; c < hd; ++c) {
            double acc = 0;
            for (std::int64_t j = 0; j < T; ++j) acc += double(P[ix.p(b, h, i, j)]) * qkv[ix.qkv(b, j, h, c, 2)];
            wy[ix.y(b, i, h, c)] = acc;
          }
        }
    require_close(S, wS, hd);
    require_close(y, wy, T);

    // Backward products: dP into a buffer of its own, then dq, dk, dv from the given dS.
    const auto bwd = plans::attention_backward_plans(s);
    execute(bwd.dprobs, {qkv.data(), nullptr, dy.data(), P.data(), dP.data(), dqkv.data()});
    execute(bwd.dq, {qkv.data(), nullptr, dy.data(), P.data(), dS.data(), dqkv.data()});
    execute(bwd.dk, {qkv.data(), nullptr, dy.data(), P.data(), dS.data(), dqkv.data()});
    execute(bwd.dv, {qkv.data(), nullptr, dy.data(), P.data(), dS.data(), dqkv.data()});
    std::vector<double> wdP(dP.size()), wd(dqkv.size());
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t i = 0; i < T; ++i) {
          for (std::int64_t j = 0; j < T; ++j) {
            double acc = 0;
            for (std::int64_t c = 0; c < hd; ++c) acc += double(dy[ix.y(b, i, h, c)]) * qkv[ix.qkv(b, j, h, c, 2)];
            wdP[ix.p(b, h, i, j)] = acc;
          }
          for (std::int64_t c = 0; c < hd; ++c) {
            double aq = 0, ak = 0, av = 0;
            for (std::int64_t j = 0; j < T; ++j) {
              aq += double(dS[ix.p(b, h, i, j)]) * qkv[ix.qkv(b, j, h, c, 1)];
              ak += double(dS[ix.p(b, h, j, i)]) * qkv[ix.qkv(b, j, h, c, 0)];
              av += double(P[ix.p(b, h, j, i)]) * dy[ix.y(b, j, h, c)];
            }
            wd[ix.qkv(b, i, h, c, 0)] = scale * aq;
            wd[ix.qkv(b, i, h, c, 1)] = scale * ak;
            wd[ix.qkv(b, i, h, c, 2)] = av;
          }
        }
    require_close(dP, wdP, hd);
    require_close(dqkv, wd, T);  // every element written: no 7.0 left
  }
}

TEST_CASE("cuBLAS plans of causal attention respect cuBLAS's rules and stay inside their buffers",
          "[plans][attention]") {
  for (const AttentionShape& s : kShapes) {
    INFO("B=" << s.batch << " T=" << s.seq << " H=" << s.heads << " hd=" << s.head_dim);
    const auto f = plans::attention_forward_plans(s);
    const auto g = plans::attention_backward_plans(s);
    std::vector<const std::vector<plans::BatchedGemm>*> lists{&f.scores, &f.values, &g.dprobs, &g.dq, &g.dk, &g.dv};
    // One call per index of the shorter axis, the other batched.
    const std::int64_t calls = std::min(s.batch, s.heads), batch = std::max(s.batch, s.heads);
    for (const auto* list : lists) {
      REQUIRE(static_cast<std::int64_t>(list->size()) == calls);
      std::set<std::int64_t> outputs;  // no output element written twice by one product
      std::int64_t twice = 0;
      for (const plans::BatchedGemm& p : *list) {
        CHECK(p.batch == batch);
        CHECK(p.beta == 0.0f);
        // lda >= rows of A as stored (m untransposed, k transposed), ldb likewise, ldc >= m.
        CHECK(p.a.ld >= (p.transa == plans::Trans::none ? p.m : p.k));
        CHECK(p.b.ld >= (p.transb == plans::Trans::none ? p.k : p.n));
        CHECK(p.c.ld >= p.m);
        // The last element each view touches lies inside its buffer.
        const auto last = [&](const plans::AttnView& v, std::int64_t rows, std::int64_t cols) {
          return v.offset + (p.batch - 1) * v.stride + (cols - 1) * v.ld + rows - 1;
        };
        const bool ta = p.transa == plans::Trans::transpose, tb = p.transb == plans::Trans::transpose;
        CHECK(last(p.a, ta ? p.k : p.m, ta ? p.m : p.k) < buffer_size(s, p.a.buffer));
        CHECK(last(p.b, tb ? p.n : p.k, tb ? p.k : p.n) < buffer_size(s, p.b.buffer));
        CHECK(last(p.c, p.m, p.n) < buffer_size(s, p.c.buffer));
        for (std::int64_t i = 0; i < p.batch; ++i)
          for (std::int64_t col = 0; col < p.n; ++col)
            for (std::int64_t row = 0; row < p.m; ++row)
              twice += outputs.insert(p.c.offset + i * p.c.stride + col * p.c.ld + row).second ? 0 : 1;
      }
      CHECK(twice == 0);
    }
  }
}
