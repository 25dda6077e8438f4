#pragma once
// Runs the attention core's cuBLAS plans (kernels/cuda/plans/attention_plan.hpp) through
// OpenBLAS in column-major mode, one cblas_sgemm per matrix of each batched call, exactly as
// attention.cu passes them to cublasGemmStridedBatchedEx. Shared by the plan test and the
// SIMT test that chains the plans with the softmax kernels.
#include <cblas.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/plans/attention_plan.hpp"

namespace codistill::test::attention_plans {

namespace plans = kernels::cuda::plans;

// The call's buffers (host memory), by role; sizes for the bounds checks.
struct Buffers {
  float *qkv = nullptr, *y = nullptr, *dy = nullptr, *probs = nullptr, *scratch = nullptr, *dqkv = nullptr;
  float* of(plans::AttnBuffer b) const {
    switch (b) {
      case plans::AttnBuffer::qkv: return qkv;
      case plans::AttnBuffer::y: return y;
      case plans::AttnBuffer::dy: return dy;
      case plans::AttnBuffer::probs: return probs;
      case plans::AttnBuffer::scratch: return scratch;
      default: return dqkv;
    }
  }
};

// Elements of each buffer for shape s.
inline std::int64_t buffer_size(const kernels::AttentionShape& s, plans::AttnBuffer b) {
  switch (b) {
    case plans::AttnBuffer::qkv:
    case plans::AttnBuffer::dqkv: return s.rows() * 3 * s.d_model();
    case plans::AttnBuffer::y:
    case plans::AttnBuffer::dy: return s.rows() * s.d_model();
    default: return s.batch * s.heads * s.seq * s.seq;
  }
}

inline CBLAS_TRANSPOSE blas(plans::Trans t) { return t == plans::Trans::transpose ? CblasTrans : CblasNoTrans; }

inline void execute(const plans::BatchedGemm& g, const Buffers& b) {
  for (std::int64_t i = 0; i < g.batch; ++i)
    cblas_sgemm(CblasColMajor, blas(g.transa), blas(g.transb), static_cast<int>(g.m), static_cast<int>(g.n),
                static_cast<int>(g.k), g.alpha, b.of(g.a.buffer) + g.a.offset + i * g.a.stride,
                static_cast<int>(g.a.ld), b.of(g.b.buffer) + g.b.offset + i * g.b.stride, static_cast<int>(g.b.ld),
                g.beta, b.of(g.c.buffer) + g.c.offset + i * g.c.stride, static_cast<int>(g.c.ld));
}

inline void execute(const std::vector<plans::BatchedGemm>& calls, const Buffers& b) {
  for (const auto& g : calls) execute(g, b);
}

}  // namespace codistill::test::attention_plans
