// Fully connected layer through cuBLAS (linear.hpp). The row-major -> column-major mapping
// of each product is a plan (plans/gemm_plan.hpp) passed here verbatim; the tests run every
// plan through OpenBLAS in column-major mode. The bias and its gradient go through
// bias_activation.cu (deterministic column sums). A weight held as bf16 (a forward-only
// model's) is cuBLAS's A as stored, beside x rounded by bf16.cu's kernel.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <string>

#include "kernels/cuda/backend_impl.cuh"
#include "kernels/cuda/bf16.hpp"
#include "kernels/cuda/bias_activation.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/entry.cuh"
#include "kernels/cuda/linear.hpp"
#include "kernels/cuda/plans/gemm_plan.hpp"
#include "kernels/cuda/resources.cuh"

namespace codistill::kernels::cuda {
namespace {

// The queue's cuBLAS handle (resources.cuh): bound to ctx.stream, with its own workspace.
cublasHandle_t handle_for(const Context& ctx) {
  StreamResources& r = resources_of(ctx, "linear");
  detail::use_device(ctx);
  return r.cublas();
}

void check_sizes(const char* op, std::int64_t M, std::int64_t N, std::int64_t K) {
  if (M < 0 || N < 1 || K < 1)
    throw std::invalid_argument(std::string(op) + " (cuda): bad sizes batch=" + std::to_string(M) +
                                " out=" + std::to_string(N) + " in=" + std::to_string(K) +
                                " (need batch >= 0, out >= 1, in >= 1)");
  if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
    throw std::invalid_argument(std::string(op) + " (cuda): a dimension exceeds 2^31-1 (batch=" +
                                std::to_string(M) + " out=" + std::to_string(N) +
                                " in=" + std::to_string(K) + ")");
}

cublasOperation_t op_of(plans::Trans t) {
  return t == plans::Trans::transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
}

using Operands = GemmOperands;

// The row-major operand of a role: a plan reads only inputs and writes only outputs.
const float* in_of(const Operands& ops, plans::Operand o) {
  switch (o) {
    case plans::Operand::x: return ops.x;
    case plans::Operand::w: return ops.w;
    case plans::Operand::dy: return ops.dy;
    default: throw std::logic_error("linear (cuda): a plan reads an output operand");
  }
}
float* out_of(const Operands& ops, plans::Operand o) {
  switch (o) {
    case plans::Operand::y: return ops.y;
    case plans::Operand::dx: return ops.dx;
    case plans::Operand::dw: return ops.dw;
    default: throw std::logic_error("linear (cuda): a plan writes an input operand");
  }
}

// C = alpha op(A) op(B) + beta C (column-major), float32 in and out, exactly as planned
// (through bf16 operands when the context says so).
// TF32 tensor cores only when the context allows them: plain float32 keeps results within
// float tolerance of the CPU.
// Mixed precision (ctx.bf16_gemm): the two inputs rounded to bf16 into the queue's bf16
// scratch (same layouts, so the plan is unchanged), then bf16 x bf16 -> float32 with float32
// accumulation (CUBLAS_COMPUTE_32F: tensor cores, no TF32 involved).
void gemm_bf16(const Context& ctx, const plans::GemmPlan& p, const Operands& ops) {
  cublasHandle_t h = handle_for(ctx);
  const std::int64_t na = plans::a_span(p), nb = plans::b_span(p);
  const std::int64_t na_padded = (na + 127) / 128 * 128;  // B starts 256-byte aligned
  auto* ws = static_cast<std::uint16_t*>(
      resources_of(ctx, "linear (bf16)").bf16_scratch(static_cast<std::size_t>(na_padded + nb) * 2));
  round_to_bf16(in_of(ops, p.a), ws, na, ctx);
  round_to_bf16(in_of(ops, p.b), ws + na_padded, nb, ctx);
  CODISTILL_CUBLAS_CHECK(cublasGemmEx(
      h, op_of(p.transa), op_of(p.transb), static_cast<int>(p.m), static_cast<int>(p.n),
      static_cast<int>(p.k), &p.alpha, ws, CUDA_R_16BF, static_cast<int>(p.lda), ws + na_padded,
      CUDA_R_16BF, static_cast<int>(p.ldb), &p.beta, out_of(ops, p.c), CUDA_R_32F,
      static_cast<int>(p.ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// A weight held as bf16 (a forward-only model's): A is that weight as stored, only x is
// rounded (into the queue's bf16 scratch), then the bf16 GEMM as above. No float32 copy of
// the weight: that copy is the memory bf16 weights save.
void gemm_bf16_weight(const Context& ctx, const plans::GemmPlan& p, const float* x, const std::uint16_t* w,
                      float* y) {
  if (p.a != plans::Operand::w || p.b != plans::Operand::x || p.c != plans::Operand::y)
    throw std::logic_error("linear (cuda, bf16 weights): the plan's A must be w, B x and C y");
  cublasHandle_t h = handle_for(ctx);
  const std::int64_t nb = plans::b_span(p);
  auto* xb = static_cast<std::uint16_t*>(
      resources_of(ctx, "linear (bf16 weights)").bf16_scratch(static_cast<std::size_t>(nb) * 2));
  round_to_bf16(x, xb, nb, ctx);
  CODISTILL_CUBLAS_CHECK(cublasGemmEx(
      h, op_of(p.transa), op_of(p.transb), static_cast<int>(p.m), static_cast<int>(p.n),
      static_cast<int>(p.k), &p.alpha, w, CUDA_R_16BF, static_cast<int>(p.lda), xb, CUDA_R_16BF,
      static_cast<int>(p.ldb), &p.beta, y, CUDA_R_32F, static_cast<int>(p.ldc), CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

void gemm(const Context& ctx, const plans::GemmPlan& p, const Operands& ops) {
  if (ctx.bf16_gemm) {
    gemm_bf16(ctx, p, ops);
    return;
  }
  cublasHandle_t h = handle_for(ctx);
  const cublasComputeType_t compute =
      ctx.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CODISTILL_CUBLAS_CHECK(cublasGemmEx(
      h, op_of(p.transa), op_of(p.transb), static_cast<int>(p.m), static_cast<int>(p.n),
      static_cast<int>(p.k), &p.alpha, in_of(ops, p.a), CUDA_R_32F, static_cast<int>(p.lda),
      in_of(ops, p.b), CUDA_R_32F, static_cast<int>(p.ldb), &p.beta, out_of(ops, p.c), CUDA_R_32F,
      static_cast<int>(p.ldc), compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void run_gemm_plan(const plans::GemmPlan& p, const GemmOperands& ops, const Context& ctx) {
  gemm(ctx, p, ops);
}

void linear_forward(const float* x, const float* w, const float* b, float* y, std::int64_t M,
                    std::int64_t N, std::int64_t K, const Context& ctx) {
  check_sizes("linear_forward", M, N, K);
  if (M == 0) return;  // an empty batch: nothing to write
  Operands ops;
  ops.x = x, ops.w = w, ops.y = y;
  gemm(ctx, plans::linear_forward(M, N, K), ops);
  if (b) bias_activation_forward(y, b, nullptr, M, N, Activation::none, ctx);
}

void run_gemm_plan_bf16_weight(const plans::GemmPlan& p, const float* x, const std::uint16_t* w, float* y,
                               const Context& ctx) {
  gemm_bf16_weight(ctx, p, x, w, y);
}

void linear_forward_bf16_weights(const float* x, const std::uint16_t* w, const float* b, float* y, std::int64_t M,
                                 std::int64_t N, std::int64_t K, const Context& ctx) {
  check_sizes("linear_forward (bf16 weights)", M, N, K);
  if (M == 0) return;
  gemm_bf16_weight(ctx, plans::linear_forward_bf16_weights(M, N, K), x, w, y);
  if (b) bias_activation_forward(y, b, nullptr, M, N, Activation::none, ctx);
}

void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* db, std::int64_t M, std::int64_t N, std::int64_t K, bool accumulate,
                     const Context& ctx) {
  check_sizes("linear_backward", M, N, K);
  if (M == 0) {
    // No rows: dw and db are sums over nothing (cuBLAS would not be asked for k = 0).
    if (!accumulate) {
      detail::use_device(ctx);
      CODISTILL_CUDA_CHECK(
          cudaMemsetAsync(dw, 0, sizeof(float) * N * K, detail::stream_of(ctx)));
      if (db)
        CODISTILL_CUDA_CHECK(cudaMemsetAsync(db, 0, sizeof(float) * N, detail::stream_of(ctx)));
    }
    return;
  }
  Operands ops;
  ops.x = x, ops.w = w, ops.dy = dy, ops.dx = dx, ops.dw = dw;
  if (dx) gemm(ctx, plans::linear_backward_input(M, N, K), ops);
  gemm(ctx, plans::linear_backward_weight(M, N, K, accumulate), ops);
  if (db)
    bias_activation_backward(dy, nullptr, nullptr, db, M, N, Activation::none, accumulate, ctx);
}

// ---- the backend's entry points (kernels/op_list.def): the checks of CudaBackend::enter, then
// the launches above on the queue's stream ----------------------------------------------------

using ops::f32;

void CudaBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y,
                                 Activation act, Tensor* pre, kernels::Queue& q) {
  const char* op = "linear";
  CudaQueue& cq = enter(q, act == Activation::none ? Op::linear : Op::linear_activation, x.dtype(), op);
  // A weight held as bf16 (a forward-only model's) beside float32 x, b and y.
  const bool bf16_w = w.dtype() == DType::bf16 && x.dtype() == DType::f32;
  if (bf16_w) require_support(*this, Op::linear_bf16_weights, x.dtype(), op);
  const std::int64_t M = x.dim(0), N = w.dim(0), K = w.dim(1);
  // Only gelu's and silu's backward need the pre-activation.
  Tensor* keep = keeps_input(act) ? pre : nullptr;
  ops::expect(cq.device(), op,
              {{x, M * K, "x"}, {w, N * K, "w", bf16_w ? DType::bf16 : DType::f32}, {b, N, "b"}, {y, M * N, "y"},
               {keep, M * N, "pre"}});
  const Context ctx = cq.context();
  // As the CPU's fast path: bf16 weights are bf16 products, which the queue must be making.
  if (bf16_w && !ctx.bf16_gemm)
    throw std::invalid_argument("linear (cuda, bf16 weights): the queue computes in float32; bf16 weights need a "
                                "bf16-compute queue (QueueOptions::compute)");
  auto product = [&](const float* bias) {
    if (bf16_w)
      cuda::linear_forward_bf16_weights(f32(x), static_cast<const std::uint16_t*>(w.raw()), bias, f32(y), M, N, K,
                                        ctx);
    else
      cuda::linear_forward(f32(x), f32(w), bias, f32(y), M, N, K, ctx);
  };
  if (act == Activation::none) {
    product(f32(b));
    return;
  }
  // The GEMM without bias, then bias + activation in one pass over y.
  product(nullptr);
  bias_activation_forward(f32(y), f32(b), f32(keep), M, N, act, ctx);
}

void CudaBackend::linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                                  Tensor& dw, Tensor* db, Activation act, const Tensor* saved,
                                  Tensor* dpre, bool accumulate, kernels::Queue& q) {
  const char* op = "linear backward";
  CudaQueue& cq = enter(q, act == Activation::none ? Op::linear : Op::linear_activation, x.dtype(), op);
  const std::int64_t M = x.dim(0), N = w.dim(0), K = w.dim(1);
  ops::expect(cq.device(), op,
              {{x, M * K, "x"}, {w, N * K, "w"}, {dy, M * N, "dy"}, {dx, M * K, "dx"}, {dw, N * K, "dw"},
               {db, N, "db"}});
  const Context ctx = cq.context();
  if (act == Activation::none) {
    cuda::linear_backward(f32(x), f32(w), f32(dy), f32(dx), f32(dw), f32(db), M, N, K, accumulate, ctx);
    return;
  }
  if (!saved || !dpre)
    throw std::invalid_argument("linear backward (cuda): a fused activation needs saved and dpre");
  ops::expect(cq.device(), op, {{saved, M * N, "saved"}, {dpre, M * N, "dpre"}});
  // dpre = dy * act'(saved) and db += colsum(dpre) in one pass, then the GEMMs on dpre.
  bias_activation_backward(f32(dy), f32(*saved), f32(dpre), f32(db), M, N, act, accumulate, ctx);
  cuda::linear_backward(f32(x), f32(w), f32(*dpre), f32(dx), f32(dw), nullptr, M, N, K, accumulate, ctx);
}

}  // namespace codistill::kernels::cuda
