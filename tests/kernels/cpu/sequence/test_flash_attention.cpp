// Flash attention (no T x T matrix) on the CPU: reference and fast path against the
// materialized causal_attention op (y, dqkv), the log-sum-exp, each ISA copy, both backward
// schedules, a finite-difference gradient in double, and the size checks of the entry points.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/sequence/attention.hpp"
#include "kernels/cpu/sequence/flash_attention.hpp"
#include "support/test_util.hpp"

using namespace codistill::kernels::cpu;
using codistill::kernels::AttentionShape;
using codistill::test::fresh_seed;
using codistill::test::IsaScope;
using codistill::test::max_rel_error;
using codistill::test::numeric_gradient;
using codistill::test::poisoned;
using codistill::test::random_vector;
using codistill::test::rel_error;

namespace {

std::size_t rows(const AttentionShape& s) { return static_cast<std::size_t>(s.rows()); }
std::size_t pairs_seq(const AttentionShape& s) { return static_cast<std::size_t>(s.batch * s.heads * s.seq); }

// One forward and backward of each op on the same inputs.
template <class T>
struct Run {
  std::vector<T> y, lse, dqkv;
};

template <class T>
Run<T> flash(const std::vector<T>& qkv, const std::vector<T>& dy, const AttentionShape& s, Impl impl) {
  const std::size_t D = static_cast<std::size_t>(s.d_model());
  Run<T> r{poisoned<T>(rows(s) * D), poisoned<T>(pairs_seq(s)), poisoned<T>(rows(s) * 3 * D)};
  flash_attention_forward<T>(qkv.data(), r.y.data(), r.lse.data(), s, impl);
  flash_attention_backward<T>(qkv.data(), r.y.data(), r.lse.data(), dy.data(), r.dqkv.data(), s, impl);
  return r;
}

template <class T>
Run<T> materialized(const std::vector<T>& qkv, const std::vector<T>& dy, const AttentionShape& s, Impl impl) {
  const std::size_t D = static_cast<std::size_t>(s.d_model()), P = pairs_seq(s) * static_cast<std::size_t>(s.seq);
  Run<T> r{poisoned<T>(rows(s) * D), {}, poisoned<T>(rows(s) * 3 * D)};
  std::vector<T> probs = poisoned<T>(P), scratch = poisoned<T>(P);
  attention_forward<T>(qkv.data(), r.y.data(), probs.data(), s, impl);
  attention_backward<T>(qkv.data(), probs.data(), dy.data(), r.dqkv.data(), scratch.data(), s, impl);
  return r;
}

// float32: the materialized op's bound in the op driver for a sum of T * head_dim products
// (1e-5 .. 1e-4); float64 1e-11.
template <class T>
double bound(const AttentionShape& s) {
  if (sizeof(T) == 8) return 1e-11;
  return std::clamp(2e-6 * std::sqrt(static_cast<double>(s.seq * s.head_dim)), 1e-5, 1e-4);
}

}  // namespace

TEMPLATE_TEST_CASE("flash attention matches the materialized op", "[attention][flash]", float, double) {
  using T = TestType;
  const auto seed = fresh_seed();
  const Impl impl = GENERATE(Impl::reference, Impl::fast);
  set_num_threads(GENERATE(1, 2));
  // T = 1 (a row that sees only itself), odd T around the block size of 128 (127, 129,
  // 257) and 1023, odd head dims (3, 65), B and H > 1.
  const auto [B, Tn, H, hd] = GENERATE(table<std::int64_t, std::int64_t, std::int64_t, std::int64_t>(
      {{1, 1, 1, 1}, {2, 1, 2, 3}, {2, 37, 3, 3}, {1, 127, 2, 65}, {3, 129, 1, 5}, {2, 257, 2, 16}, {1, 1023, 2, 8}}));
  const AttentionShape s{B, Tn, H, hd};
  INFO("seed " << seed << " B " << B << " T " << Tn << " H " << H << " hd " << hd << " impl "
               << (impl == Impl::fast ? "fast" : "reference"));
  const auto qkv = random_vector<T>(rows(s) * 3 * H * hd, seed, -2, 2);
  const auto dy = random_vector<T>(rows(s) * H * hd, seed + 1);
  const Run<T> want = materialized(qkv, dy, s, Impl::reference), got = flash(qkv, dy, s, impl);
  CHECK(rel_error(got.y, want.y) < bound<T>(s));
  CHECK(rel_error(got.dqkv, want.dqkv) < 2 * bound<T>(s));
  // lse against the reference's (both are the log of the row's softmax denominator).
  const Run<T> ref = flash(qkv, dy, s, Impl::reference);
  CHECK(max_rel_error(got.lse, ref.lse, 1.0) < bound<T>(s));
}

TEST_CASE("flash attention in float32 at T = 1024 and 2048 matches the materialized op", "[attention][flash]") {
  const auto seed = fresh_seed();
  const auto [Tn, H, hd] = GENERATE(table<std::int64_t, std::int64_t, std::int64_t>({{1024, 2, 64}, {2048, 1, 32}}));
  const AttentionShape s{1, Tn, H, hd};
  INFO("seed " << seed << " T " << Tn);
  const auto qkv = random_vector<float>(rows(s) * 3 * H * hd, seed, -2, 2);
  const auto dy = random_vector<float>(rows(s) * H * hd, seed + 1);
  const Run<float> want = materialized(qkv, dy, s, Impl::fast), got = flash(qkv, dy, s, Impl::fast);
  CHECK(rel_error(got.y, want.y) < 1e-4);
  CHECK(rel_error(got.dqkv, want.dqkv) < 2e-4);
}

TEMPLATE_TEST_CASE("flash attention's fast path: every ISA copy, both backward schedules", "[attention][flash]",
                   float, double) {
  using T = TestType;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  const AttentionShape s{1, 300, 2, 24};  // 2 pairs, 3 blocks of 128, the last one short
  const auto qkv = random_vector<T>(rows(s) * 3 * 48, seed, -2, 2), dy = random_vector<T>(rows(s) * 48, seed + 1);
  const Run<T> ref = flash(qkv, dy, s, Impl::reference);
  for (const char* isa : {"baseline", "avx2", "avx512"}) {
    INFO("isa " << isa);
    IsaScope scope(isa);
    // One thread: a task per pair; two threads with two pairs: key blocks, then query blocks.
    set_num_threads(1);
    const Run<T> one = flash(qkv, dy, s, Impl::fast);
    set_num_threads(2);
    const Run<T> two = flash(qkv, dy, s, Impl::fast);
    CHECK(rel_error(one.y, ref.y) < bound<T>(s));
    CHECK(rel_error(one.dqkv, ref.dqkv) < 2 * bound<T>(s));
    // The two schedules sum every output in the same order.
    CHECK(max_rel_error(two.y, one.y) == 0.0);
    CHECK(max_rel_error(two.dqkv, one.dqkv) == 0.0);
  }
}

TEST_CASE("flash attention's gradient matches finite differences (double)", "[attention][flash][gradcheck]") {
  const auto seed = fresh_seed();
  const Impl impl = GENERATE(Impl::reference, Impl::fast);
  const auto [B, Tn, H, hd] = GENERATE(
      table<std::int64_t, std::int64_t, std::int64_t, std::int64_t>({{1, 1, 1, 2}, {2, 5, 2, 3}, {1, 9, 1, 4}}));
  const AttentionShape s{B, Tn, H, hd};
  INFO("seed " << seed << " T " << Tn << " impl " << (impl == Impl::fast ? "fast" : "reference"));
  auto qkv = random_vector<double>(rows(s) * 3 * H * hd, seed, -2, 2);
  const auto r = random_vector<double>(rows(s) * H * hd, seed + 1);
  std::vector<double> y(r.size()), lse(pairs_seq(s));
  auto objective = [&] {  // sum(y * r): its gradient is the backward of dy = r
    flash_attention_forward<double>(qkv.data(), y.data(), lse.data(), s, impl);
    double sum = 0;
    for (std::size_t i = 0; i < y.size(); ++i) sum += y[i] * r[i];
    return sum;
  };
  std::vector<double*> ptrs;
  for (double& v : qkv) ptrs.push_back(&v);
  const auto want = numeric_gradient(objective, ptrs);
  objective();
  auto dqkv = poisoned<double>(qkv.size());
  flash_attention_backward<double>(qkv.data(), y.data(), lse.data(), r.data(), dqkv.data(), s, impl);
  CHECK(max_rel_error(dqkv, want, codistill::test::kGradFloor) < codistill::test::kGradTolerance);
}

TEST_CASE("the flash attention entry points check their sizes", "[attention][flash]") {
  namespace k = codistill::kernels;
  k::Backend& cpu = k::backend_for(k::DeviceKind::cpu);
  auto q = cpu.make_queue(k::Device{k::DeviceKind::cpu, 0}, {});
  const AttentionShape s{2, 3, 2, 4};
  k::Tensor qkv = k::Tensor::zeros({6, 24}), y = k::Tensor::zeros({6, 8}), lse = k::Tensor::zeros({2, 2, 3});
  k::Tensor bad_lse = k::Tensor::zeros({2, 2, 2}), dqkv = k::Tensor::zeros({6, 24});
  CHECK_NOTHROW(cpu.flash_attention_forward(qkv, y, lse, s, *q));
  CHECK_THROWS_WITH(cpu.flash_attention_forward(qkv, y, bad_lse, s, *q), Catch::Contains("lse"));
  CHECK_THROWS_WITH(cpu.flash_attention_backward(qkv, y, lse, qkv, dqkv, s, *q), Catch::Contains("dy"));
  CHECK(cpu.supports(k::Op::flash_attention, k::DType::f64));
  CHECK_FALSE(cpu.supports(k::Op::flash_attention, k::DType::bf16));
}
