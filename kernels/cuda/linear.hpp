#pragma once
// Fully connected layer on CUDA through cuBLAS, float32 (TF32 tensor cores when
// ctx.allow_tf32). Same layouts and semantics as kernels/cpu/linear.hpp, the reference
// the [cuda] tests compare against:
//   forward:  y[M,N] = x[M,K] * w[N,K]^T (+ b[N] when b is not null)
//   backward: dx[M,K] = dy * w (skipped when dx is null);
//             dw[N,K] (+)= dy^T * x;  db[N] (+)= column sums of dy (db may be null)
// The bias of a layer followed by an activation is better applied by
// bias_activation_forward (kernels/cuda/bias_activation.hpp): pass b = null here then.
// The cuBLAS handle is the queue's own (ctx.resources, kernels/cuda/resources.cuh).
#include <cstdint>

#include "kernels/cuda/context.hpp"
#include "kernels/cuda/plans/gemm_plan.hpp"

namespace codistill::kernels::cuda {

void linear_forward(const float* x, const float* w, const float* b, float* y, std::int64_t M,
                    std::int64_t N, std::int64_t K, const Context& ctx);

// The forward with w held as bf16 (Op::linear_bf16_weights: a forward-only model's, read as
// stored) and x rounded to bf16 by the CPU's rule (bf16.hpp), float32 accumulation and output,
// plus b when not null. x's rounded copy lives in the queue's bf16 scratch.
void linear_forward_bf16_weights(const float* x, const std::uint16_t* w, const float* b, float* y, std::int64_t M,
                                 std::int64_t N, std::int64_t K, const Context& ctx);

void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* db, std::int64_t M, std::int64_t N, std::int64_t K, bool accumulate,
                     const Context& ctx);

// One planned product (plans/gemm_plan.hpp) on the queue's cuBLAS handle, exactly as
// planned, with the row-major operands by role (a plan reads only inputs, writes only its
// output; a role it names must not be null). For ops built from the linear layer's
// products on views of their tensors (the fused distillation head's chunks).
struct GemmOperands {
  const float *x = nullptr, *w = nullptr, *dy = nullptr;
  float *y = nullptr, *dx = nullptr, *dw = nullptr;
};
void run_gemm_plan(const plans::GemmPlan& p, const GemmOperands& ops, const Context& ctx);
// A plan whose A is a weight held as bf16 (plans::linear_forward_bf16_weights' roles: A w,
// B x, C y; std::logic_error otherwise): w read as stored, x rounded first.
void run_gemm_plan_bf16_weight(const plans::GemmPlan& p, const float* x, const std::uint16_t* w, float* y,
                               const Context& ctx);

}  // namespace codistill::kernels::cuda
