// The CUDA backend's causal softmax kernels (kernels/cuda/device/attention.cuh), run from
// their real source under the SIMT executor with the shapes of attention.cuh, chained
// with the cuBLAS plans of kernels/cuda/plans/attention_plan.hpp (run through OpenBLAS) in
// the order kernels/cuda/sequence/attention.cu queues them, against the CPU twin
// (kernels/cpu/sequence/attention, reference in double and fast path): y, the saved probabilities
// (masked entries exactly 0) and dqkv, for T = 1, T = 7, T > 32 (lanes that loop), head_dim 3,
// batched along heads and along sequences. Outputs poisoned; every schedule gives the same bits.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/sequence/attention.hpp"
#include "kernels/cuda/device/attention.cuh"
#include "tests/kernels/cuda_plans/attention_plan_runner.hpp"
#include "tests/kernels/cuda_simt/simt_support.hpp"

namespace {

using namespace codistill;
using namespace codistill::test::simt_kernels;
namespace ap = codistill::test::attention_plans;
namespace dev = kernels::cuda::device;
using kernels::AttentionShape;

struct Result {
  std::vector<float> y, probs, dqkv;
};

Result run_simt(const AttentionShape& s, const std::vector<float>& qkv_v, const std::vector<float>& dy_v,
                std::uint64_t seed) {
  const std::int64_t D = s.d_model(), rows = s.batch * s.heads * s.seq;
  const auto nP = static_cast<std::size_t>(rows * s.seq);
  simt::DeviceBuffer<float> qkv(qkv_v), dy(dy_v), y(dy_v.size()), probs(nP), scratch(nP), dqkv(qkv_v.size());
  const ap::Buffers buf{qkv.data(), y.data(), dy.data(), probs.data(), scratch.data(), dqkv.data()};
  const auto shape = config(shapes::attention_rows(rows), seed);
  // attention_forward
  const auto f = ap::plans::attention_forward_plans(s);
  ap::execute(f.scores, buf);
  simt::launch(dev::causal_softmax_kernel, shape, probs.data(), rows, s.seq);
  ap::execute(f.values, buf);
  // attention_backward
  const auto b = ap::plans::attention_backward_plans(s);
  ap::execute(b.dprobs, buf);
  simt::launch(dev::causal_softmax_backward_kernel, shape, static_cast<const float*>(probs.data()), scratch.data(),
               rows, s.seq);
  ap::execute(b.dq, buf);
  ap::execute(b.dk, buf);
  ap::execute(b.dv, buf);
  (void)D;
  return {y.download(), probs.download(), dqkv.download()};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("SIMT: causal attention (plans + softmax kernels) matches the CPU twin", "[simt][attention]") {
  const AttentionShape shapes_[] = {{1, 1, 1, 1}, {2, 1, 2, 4}, {2, 7, 2, 3}, {3, 7, 1, 5},
                                    {1, 16, 4, 8}, {2, 33, 3, 17}, {5, 40, 2, 3}, {1, 70, 1, 3}};
  for (const AttentionShape& s : shapes_) {
    const std::int64_t D = s.d_model(), T = s.seq;
    const std::uint64_t data_seed = static_cast<std::uint64_t>(s.batch * 1009 + T * 101 + s.heads * 13 + s.head_dim);
    const auto qkv = random_floats(static_cast<std::size_t>(s.rows() * 3 * D), data_seed, -2, 2);
    const auto dy = random_floats(static_cast<std::size_t>(s.rows() * D), data_seed + 1);
    const auto nP = static_cast<std::size_t>(s.batch * s.heads * T * T);
    std::vector<float> y_ref(dy.size()), p_ref(nP), d_ref(qkv.size()), scratch(nP);
    std::vector<float> y_fast(dy.size()), p_fast(nP), d_fast(qkv.size());
    using kernels::cpu::Impl;
    kernels::cpu::attention_forward(qkv.data(), y_ref.data(), p_ref.data(), s, Impl::reference);
    kernels::cpu::attention_backward(qkv.data(), p_ref.data(), dy.data(), d_ref.data(), scratch.data(), s,
                                     Impl::reference);
    kernels::cpu::attention_forward(qkv.data(), y_fast.data(), p_fast.data(), s, Impl::fast);
    kernels::cpu::attention_backward(qkv.data(), p_fast.data(), dy.data(), d_fast.data(), scratch.data(), s,
                                     Impl::fast);
    Result first;
    for (const std::uint64_t seed : kSeeds) {
      INFO("B=" << s.batch << " T=" << T << " H=" << s.heads << " hd=" << s.head_dim << " seed " << seed);
      Result r = run_simt(s, qkv, dy, seed);
      // Masked probabilities exactly 0, each causal row sums to 1.
      std::int64_t masked_nonzero = 0;
      double worst_row = 0;
      for (std::int64_t row = 0; row < s.batch * s.heads * T; ++row) {
        const std::int64_t i = row % T;
        double sum = 0;
        for (std::int64_t j = 0; j < T; ++j) {
          const float p = r.probs[static_cast<std::size_t>(row * T + j)];
          if (j > i) masked_nonzero += p != 0.0f || std::signbit(p);
          else sum += p;
        }
        worst_row = std::max(worst_row, std::fabs(sum - 1.0));
      }
      CHECK(masked_nonzero == 0);
      CHECK(worst_row < 1e-5);
      const double terms = static_cast<double>(T * s.head_dim);
      CHECK(scaled_error(r.probs, p_ref) < 1e-6 * terms);
      CHECK(scaled_error(r.y, y_ref) < 1e-6 * terms);
      CHECK(scaled_error(r.dqkv, d_ref) < 2e-6 * terms);
      CHECK(scaled_error(r.probs, p_fast) < 1e-6 * terms);
      CHECK(scaled_error(r.dqkv, d_fast) < 2e-6 * terms);
      // Warp reductions in a fixed order: the schedule changes no bit.
      if (first.y.empty()) first = std::move(r);
      else {
        CHECK(same_bits(r.y, first.y));
        CHECK(same_bits(r.probs, first.probs));
        CHECK(same_bits(r.dqkv, first.dqkv));
      }
    }
  }
}

TEST_CASE("SIMT: the softmax kernels leave masked entries 0 and keep the causal rows' values",
          "[simt][attention]") {
  // Large scores (no overflow after the max is subtracted) and a row of equal scores.
  const std::int64_t T = 37, rows = 2 * T;
  auto S = random_floats(static_cast<std::size_t>(rows * T), 9, -80, 80);
  for (std::int64_t j = 0; j < T; ++j) S[static_cast<std::size_t>((T + 20) * T + j)] = 3.0f;
  const auto dP = random_floats(S.size(), 10);
  for (const std::uint64_t seed : kSeeds) {
    INFO("seed " << seed);
    simt::DeviceBuffer<float> P(S), dS(dP);
    const auto shape = config(shapes::attention_rows(rows), seed);
    simt::launch(dev::causal_softmax_kernel, shape, P.data(), rows, T);
    simt::launch(dev::causal_softmax_backward_kernel, shape, static_cast<const float*>(P.data()), dS.data(), rows, T);
    const auto p = P.download(), g = dS.download();
    double worst_p = 0, worst_g = 0;
    std::int64_t masked_nonzero = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t i = r % T;
      const float* s = S.data() + r * T;
      double mx = s[0];
      for (std::int64_t j = 1; j <= i; ++j) mx = std::max(mx, double(s[j]));
      double sum = 0, dot = 0;
      for (std::int64_t j = 0; j <= i; ++j) sum += std::exp(double(s[j]) - mx);
      for (std::int64_t j = 0; j <= i; ++j) dot += std::exp(double(s[j]) - mx) / sum * dP[static_cast<std::size_t>(r * T + j)];
      for (std::int64_t j = 0; j < T; ++j) {
        const auto e = static_cast<std::size_t>(r * T + j);
        if (j > i) {
          masked_nonzero += (p[e] != 0.0f) + (g[e] != 0.0f);
          continue;
        }
        const double want = std::exp(double(s[j]) - mx) / sum;
        worst_p = std::max(worst_p, std::fabs(p[e] - want));
        worst_g = std::max(worst_g, std::fabs(g[e] - want * (dP[e] - dot)));
      }
      if (r == T + 20) CHECK(p[static_cast<std::size_t>(r * T)] == Approx(1.0 / 21));  // row 20: 21 equal scores
    }
    CHECK(masked_nonzero == 0);
    CHECK(worst_p < 1e-6);
    CHECK(worst_g < 1e-6);
  }
}
