// Flash attention with bf16 GEMM operands (Compute::bf16) on the CPU: the fast path against
// the reference that rounds the same operands at the same points (in the norm: the two
// compute P and dS a float32 ulp apart, so now and then one lands on the other bf16
// neighbour), every ISA copy and both backward schedules bit for bit, the reference against
// the materialized op on bf16-rounded inputs (attention, to bf16 accuracy) and away from the
// float32 op, a finite-difference gradient of the bf16 path's code in double, and the
// queue's compute reaching the entry points.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/bf16.hpp"
#include "kernels/cpu/sequence/attention.hpp"
#include "kernels/cpu/sequence/flash_attention.hpp"
#include "support/test_util.hpp"

using namespace codistill::kernels::cpu;
using codistill::kernels::AttentionShape;
using codistill::kernels::Compute;
using codistill::test::fresh_seed;
using codistill::test::IsaScope;
using codistill::test::max_rel_error;
using codistill::test::numeric_gradient;
using codistill::test::poisoned;
using codistill::test::random_vector;

namespace {

std::size_t rows(const AttentionShape& s) { return static_cast<std::size_t>(s.rows()); }
std::size_t pairs_seq(const AttentionShape& s) { return static_cast<std::size_t>(s.batch * s.heads * s.seq); }

struct Run {
  std::vector<float> y, lse, dqkv;
};

Run flash(const std::vector<float>& qkv, const std::vector<float>& dy, const AttentionShape& s, Impl impl,
          Compute compute) {
  const std::size_t D = static_cast<std::size_t>(s.d_model());
  Run r{poisoned<float>(rows(s) * D), poisoned<float>(pairs_seq(s)), poisoned<float>(rows(s) * 3 * D)};
  flash_attention_forward<float>(qkv.data(), r.y.data(), r.lse.data(), s, impl, compute);
  flash_attention_backward<float>(qkv.data(), r.y.data(), r.lse.data(), dy.data(), r.dqkv.data(), s, impl, compute);
  return r;
}

// ||got - want|| / ||want||, NaN infinitely wrong (the op driver's op_norm_error).
double norm_error(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double dd = 0, ww = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    const double d = static_cast<double>(got[i]) - want[i];
    dd += d * d, ww += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(dd / std::max(ww, 1e-300));
}

std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = bf16_rounded(x);
  return v;
}

// Fast against reference: float32 summation order and the rare P or dS that rounds to the
// other bf16 neighbour, measured up to 4.1e-5 in the norm; with any one of the fast path's
// eleven roundings removed (the q, k, v, dy tiles of forward and backward, P in either,
// dS, the dy of Di) the largest case is 1.0e-3 to 5.2e-3 off.
constexpr double kBound = 3e-4;

}  // namespace

TEST_CASE("flash attention with bf16 operands matches its rounding reference", "[attention][flash][bf16]") {
  const auto seed = fresh_seed();
  set_num_threads(GENERATE(1, 2));
  const auto [B, Tn, H, hd] = GENERATE(table<std::int64_t, std::int64_t, std::int64_t, std::int64_t>(
      {{1, 1, 1, 1}, {2, 1, 2, 3}, {2, 37, 3, 3}, {1, 127, 2, 65}, {3, 129, 1, 5}, {2, 257, 2, 16}, {1, 1023, 2, 8}}));
  const AttentionShape s{B, Tn, H, hd};
  INFO("seed " << seed << " B " << B << " T " << Tn << " H " << H << " hd " << hd);
  const auto qkv = random_vector<float>(rows(s) * 3 * H * hd, seed, -2, 2);
  const auto dy = random_vector<float>(rows(s) * H * hd, seed + 1);
  const Run want = flash(qkv, dy, s, Impl::reference, Compute::bf16);
  const Run got = flash(qkv, dy, s, Impl::fast, Compute::bf16);
  CHECK(norm_error(got.y, want.y) < kBound);
  CHECK(norm_error(got.dqkv, want.dqkv) < kBound);
  CHECK(max_rel_error(got.lse, want.lse, 1.0) < 1e-5);
}

TEST_CASE("flash attention's bf16 reference is attention on bf16-rounded inputs", "[attention][flash][bf16]") {
  const auto seed = fresh_seed();
  const auto [B, Tn, H, hd] = GENERATE(table<std::int64_t, std::int64_t, std::int64_t, std::int64_t>(
      {{2, 37, 3, 3}, {1, 300, 2, 24}}));
  const AttentionShape s{B, Tn, H, hd};
  INFO("seed " << seed << " T " << Tn);
  const auto qkv = random_vector<float>(rows(s) * 3 * H * hd, seed, -2, 2);
  const auto dy = random_vector<float>(rows(s) * H * hd, seed + 1);
  // The materialized op in double sums on the rounded inputs, nothing rounded in between.
  const std::size_t D = static_cast<std::size_t>(s.d_model()), P = pairs_seq(s) * static_cast<std::size_t>(Tn);
  const auto rq = rounded(qkv), rdy = rounded(dy);
  std::vector<float> y(rows(s) * D), probs(P), scratch(P), dqkv(rows(s) * 3 * D);
  attention_forward<float>(rq.data(), y.data(), probs.data(), s, Impl::reference);
  attention_backward<float>(rq.data(), probs.data(), rdy.data(), dqkv.data(), scratch.data(), s, Impl::reference);
  const Run bf16 = flash(qkv, dy, s, Impl::reference, Compute::bf16);
  // What rounding P and dS adds: a bf16 rounding of each term, ~1e-3 in the norm.
  CHECK(norm_error(bf16.y, y) < 1e-2);
  CHECK(norm_error(bf16.dqkv, dqkv) < 1e-2);
  // And the rounding happens: the float32 op on the unrounded inputs is as far off (2.6e-3
  // and 2.8e-3 in y measured).
  const Run f32 = flash(qkv, dy, s, Impl::reference, Compute::f32);
  CHECK(norm_error(bf16.y, f32.y) > 3 * kBound);
  CHECK(norm_error(bf16.dqkv, f32.dqkv) > 3 * kBound);
}

TEST_CASE("flash attention's bf16 path: every ISA copy, both backward schedules", "[attention][flash][bf16]") {
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  const AttentionShape s{1, 300, 2, 24};  // 2 pairs, 3 blocks of 128, the last one short
  const auto qkv = random_vector<float>(rows(s) * 3 * 48, seed, -2, 2);
  const auto dy = random_vector<float>(rows(s) * 48, seed + 1);
  const Run ref = flash(qkv, dy, s, Impl::reference, Compute::bf16);
  for (const char* isa : {"baseline", "avx2", "avx512"}) {
    INFO("isa " << isa);
    IsaScope scope(isa);
    set_num_threads(1);  // a task per pair
    const Run one = flash(qkv, dy, s, Impl::fast, Compute::bf16);
    set_num_threads(2);  // two pairs on two threads: key blocks, then query blocks
    const Run two = flash(qkv, dy, s, Impl::fast, Compute::bf16);
    CHECK(norm_error(one.y, ref.y) < kBound);
    CHECK(norm_error(one.dqkv, ref.dqkv) < kBound);
    CHECK(max_rel_error(two.y, one.y) == 0.0);
    CHECK(max_rel_error(two.dqkv, one.dqkv) == 0.0);
  }
}

TEST_CASE("flash attention's bf16 path's gradient matches finite differences (double)",
          "[attention][flash][bf16][gradcheck]") {
  // float64 runs the bf16 path's tiles and loops with nothing rounded: its block bookkeeping
  // (tile copies, offsets, both schedules' sums) checked against the derivative.
  const auto seed = fresh_seed();
  set_num_threads(GENERATE(1, 2));
  const auto [B, Tn, H, hd] = GENERATE(table<std::int64_t, std::int64_t, std::int64_t, std::int64_t>(
      {{1, 1, 1, 2}, {2, 5, 2, 3}, {1, 9, 1, 4}, {1, 130, 1, 2}}));
  const AttentionShape s{B, Tn, H, hd};
  INFO("seed " << seed << " T " << Tn);
  auto qkv = random_vector<double>(rows(s) * 3 * H * hd, seed, -2, 2);
  const auto r = random_vector<double>(rows(s) * H * hd, seed + 1);
  std::vector<double> y(r.size()), lse(pairs_seq(s));
  auto objective = [&] {  // sum(y * r): its gradient is the backward of dy = r
    flash_attention_forward<double>(qkv.data(), y.data(), lse.data(), s, Impl::fast, Compute::bf16);
    double sum = 0;
    for (std::size_t i = 0; i < y.size(); ++i) sum += y[i] * r[i];
    return sum;
  };
  std::vector<double*> ptrs;
  for (double& v : qkv) ptrs.push_back(&v);
  const auto want = numeric_gradient(objective, ptrs);
  objective();
  auto dqkv = poisoned<double>(qkv.size());
  flash_attention_backward<double>(qkv.data(), y.data(), lse.data(), r.data(), dqkv.data(), s, Impl::fast,
                                   Compute::bf16);
  CHECK(max_rel_error(dqkv, want, codistill::test::kGradFloor) < codistill::test::kGradTolerance);
}

TEST_CASE("the flash attention entry points compute as the queue says", "[attention][flash][bf16]") {
  namespace k = codistill::kernels;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  k::Backend& cpu = k::backend_for(k::DeviceKind::cpu);
  const AttentionShape s{1, 40, 2, 8};
  const auto qkv = random_vector<float>(40 * 48, seed, -2, 2), dy = random_vector<float>(40 * 16, seed + 1);
  const Run f32 = flash(qkv, dy, s, Impl::fast, Compute::f32), bf16 = flash(qkv, dy, s, Impl::fast, Compute::bf16);
  for (Compute c : {Compute::f32, Compute::bf16}) {
    INFO(k::compute_name(c));
    auto q = cpu.make_queue(k::Device::cpu(), {.compute = c});
    k::Tensor tq = k::Tensor::empty({40, 48}), y = k::Tensor::empty({40, 16}), lse = k::Tensor::empty({1, 2, 40});
    k::Tensor tdy = k::Tensor::empty({40, 16}), dqkv = k::Tensor::empty({40, 48});
    std::copy(qkv.begin(), qkv.end(), tq.data<float>()), std::copy(dy.begin(), dy.end(), tdy.data<float>());
    cpu.flash_attention_forward(tq, y, lse, s, *q);
    cpu.flash_attention_backward(tq, y, lse, tdy, dqkv, s, *q);
    const Run& want = c == Compute::bf16 ? bf16 : f32;
    CHECK(std::vector<float>(y.data<float>(), y.data<float>() + y.numel()) == want.y);
    CHECK(std::vector<float>(dqkv.data<float>(), dqkv.data<float>() + dqkv.numel()) == want.dqkv);
  }
}
