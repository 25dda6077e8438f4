#pragma once
// The cuBLAS calls of the causal attention core (attention.cu) as data: for each product,
// exactly what is passed to cublasGemmStridedBatchedEx. CUDA-free, so the tests run every
// plan through OpenBLAS in column-major mode (tests/kernels/cuda_plans/test_attention_plan.cpp)
// and chain them with the softmax kernels under the SIMT executor against the CPU twin
// (tests/kernels/cuda_simt/test_attention_simt.cpp).
//
// Layouts (AttentionShape in kernels/ops.hpp): pair (b, h) reads q at qkv + b*T*3D + h*hd
// (k at +D, v at +2D), rows 3D apart; y and dy at b*T*D + h*hd, rows D apart; probs and
// scratch at (b*H + h)*T*T, rows T apart. A row-major [r, c] view with row stride L is the
// column-major [c, r] matrix with leading dimension L, so every product is computed
// transposed, in place, with no copy:
//   S  = scale q k^T  ->  S^T  (T x T)  = op_T(k) * q        (k, q stored hd x T, ld 3D)
//   y  = P v          ->  y^T  (hd x T) = v * P^T            (P^T is P's storage, ld T)
//   dP = dy v^T       ->  dP^T (T x T)  = op_T(v) * dy
//   dq = scale dS k   ->  dq^T (hd x T) = k * dS^T
//   dk = scale dS^T q ->  dk^T (hd x T) = q * op_T(dS)
//   dv = P^T dy       ->  dv^T (hd x T) = dy * op_T(P)
// Every call writes its whole output (beta 0): y and dqkv are overwritten, the masked part
// of S and dP is then set to 0 by the softmax kernels.
//
// The pairs are batched along one axis and looped over the other, one call per index: along
// heads (matrices hd columns or one T x T block apart) with a call per sequence, or along
// sequences (T rows apart) with a call per head, whichever needs fewer calls.
#include <cstdint>
#include <vector>

#include "kernels/cuda/plans/gemm_plan.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cuda::plans {

enum class AttnBuffer { qkv, y, dy, probs, scratch, dqkv };

// Matrix i of a batched call starts at offset + i * stride elements of its buffer.
struct AttnView {
  AttnBuffer buffer = AttnBuffer::qkv;
  std::int64_t offset = 0, ld = 0, stride = 0;
};

struct BatchedGemm {
  Trans transa = Trans::none, transb = Trans::none;
  std::int64_t m = 0, n = 0, k = 0;
  AttnView a, b, c;
  float alpha = 1.0f, beta = 0.0f;
  std::int64_t batch = 1;
};

// One list per product, one entry per call (calls in the order of the looped axis).
struct AttentionForwardPlans {
  std::vector<BatchedGemm> scores, values;  // S into probs; y = P v
};
struct AttentionBackwardPlans {
  std::vector<BatchedGemm> dprobs, dq, dk, dv;  // dP into scratch; then from dS in scratch
};

namespace detail {

// The views of pair (b, h) of one buffer, and its stride along the batched axis.
struct PairGeometry {
  const AttentionShape& s;
  bool over_heads;  // batched along heads, one call per sequence
  std::int64_t T() const { return s.seq; }
  std::int64_t D() const { return s.d_model(); }
  std::int64_t calls() const { return over_heads ? s.batch : s.heads; }
  std::int64_t batch() const { return over_heads ? s.heads : s.batch; }
  // part: 0, 1, 2 for q, k, v (qkv and dqkv only).
  AttnView view(AttnBuffer buf, std::int64_t call, int part = 0) const {
    const std::int64_t b = over_heads ? call : 0, h = over_heads ? 0 : call, hd = s.head_dim;
    switch (buf) {
      case AttnBuffer::qkv:
      case AttnBuffer::dqkv:
        return {buf, b * T() * 3 * D() + h * hd + part * D(), 3 * D(), over_heads ? hd : T() * 3 * D()};
      case AttnBuffer::y:
      case AttnBuffer::dy: return {buf, b * T() * D() + h * hd, D(), over_heads ? hd : T() * D()};
      default:
        return {buf, (b * s.heads + h) * T() * T(), T(), over_heads ? T() * T() : s.heads * T() * T()};
    }
  }
  BatchedGemm gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, AttnView a, AttnView b,
                   AttnView c, float alpha) const {
    return {ta, tb, m, n, k, a, b, c, alpha, 0.0f, batch()};
  }
};

inline PairGeometry geometry(const AttentionShape& s) { return {s, s.heads >= s.batch}; }

}  // namespace detail

inline AttentionForwardPlans attention_forward_plans(const AttentionShape& s) {
  const auto g = detail::geometry(s);
  const std::int64_t T = s.seq, hd = s.head_dim;
  const auto scale = static_cast<float>(s.scale());
  AttentionForwardPlans p;
  for (std::int64_t c = 0; c < g.calls(); ++c) {
    const AttnView q = g.view(AttnBuffer::qkv, c, 0), k = g.view(AttnBuffer::qkv, c, 1),
                   v = g.view(AttnBuffer::qkv, c, 2), P = g.view(AttnBuffer::probs, c), y = g.view(AttnBuffer::y, c);
    p.scores.push_back(g.gemm(Trans::transpose, Trans::none, T, T, hd, k, q, P, scale));
    p.values.push_back(g.gemm(Trans::none, Trans::none, hd, T, T, v, P, y, 1.0f));
  }
  return p;
}

inline AttentionBackwardPlans attention_backward_plans(const AttentionShape& s) {
  const auto g = detail::geometry(s);
  const std::int64_t T = s.seq, hd = s.head_dim;
  const auto scale = static_cast<float>(s.scale());
  AttentionBackwardPlans p;
  for (std::int64_t c = 0; c < g.calls(); ++c) {
    const AttnView q = g.view(AttnBuffer::qkv, c, 0), k = g.view(AttnBuffer::qkv, c, 1),
                   v = g.view(AttnBuffer::qkv, c, 2), P = g.view(AttnBuffer::probs, c),
                   dS = g.view(AttnBuffer::scratch, c), dy = g.view(AttnBuffer::dy, c);
    p.dprobs.push_back(g.gemm(Trans::transpose, Trans::none, T, T, hd, v, dy, dS, 1.0f));
    p.dq.push_back(g.gemm(Trans::none, Trans::none, hd, T, T, k, dS, g.view(AttnBuffer::dqkv, c, 0), scale));
    p.dk.push_back(g.gemm(Trans::none, Trans::transpose, hd, T, T, q, dS, g.view(AttnBuffer::dqkv, c, 1), scale));
    p.dv.push_back(g.gemm(Trans::none, Trans::transpose, hd, T, T, dy, P, g.view(AttnBuffer::dqkv, c, 2), 1.0f));
  }
  return p;
}

}  // namespace codistill::kernels::cuda::plans
