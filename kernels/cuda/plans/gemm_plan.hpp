#pragma once
// The cuBLAS calls of the linear layer as data: which row-major product each one computes
// and exactly what linear.cu passes to cublasGemmEx (transposes, m, n, k, leading
// dimensions, operands, alpha, beta). CUDA-free, so the tests run every plan through
// OpenBLAS in column-major mode against the row-major reference.
//
// cuBLAS is column-major; a row-major [r, c] matrix is, byte for byte, the column-major
// [c, r] matrix (its transpose), so each product is computed transposed, with no copy:
//   y  = x w^T     ->  y^T  (N x M) = op_T(w as col-major K x N) * x^T (K x M)
//   dx = dy w      ->  dx^T (K x M) = w^T (K x N) * dy^T (N x M)
//   dw = dy^T x    ->  dw^T (K x N) = x^T (K x M) * op_T(dy as col-major N x M)
// Shapes: x [M, K], w [N, K], y and dy [M, N], dx [M, K], dw [N, K].
#include <cstdint>

namespace codistill::kernels::cuda::plans {

enum class Trans { none, transpose };
enum class Operand { x, w, y, dy, dx, dw };

struct GemmPlan {
  Trans transa = Trans::none, transb = Trans::none;
  std::int64_t m = 0, n = 0, k = 0;
  Operand a = Operand::x, b = Operand::x, c = Operand::y;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  float alpha = 1.0f, beta = 0.0f;
};

// The elements cuBLAS reads of A and of B (column-major, leading dimensions included): what
// the bf16 path (linear.cu) rounds before a bf16 GEMM, so each must be exactly its operand's
// tensor (tests/kernels/cuda_plans/test_gemm_plan.cpp).
inline std::int64_t a_span(const GemmPlan& p) { return p.lda * (p.transa == Trans::transpose ? p.m : p.k); }
inline std::int64_t b_span(const GemmPlan& p) { return p.ldb * (p.transb == Trans::transpose ? p.k : p.n); }

// y[M, N] = x[M, K] w[N, K]^T
inline GemmPlan linear_forward(std::int64_t M, std::int64_t N, std::int64_t K) {
  return {Trans::transpose, Trans::none, N, M, K, Operand::w, Operand::x, Operand::y,
          K, K, N, 1.0f, 0.0f};
}

// y[M, N] = x[M, K] w[N, K]^T with w held as bf16 (Op::linear_bf16_weights, a forward-only
// model's): linear_forward's plan, whose A is w, read as stored (CUDA_R_16BF, a_span = the
// N K elements of w: no copy of the weight), and whose B is x, rounded to bf16 into scratch
// first (b_span = its M K elements). linear.cu refuses a plan with other roles.
inline GemmPlan linear_forward_bf16_weights(std::int64_t M, std::int64_t N, std::int64_t K) {
  return linear_forward(M, N, K);
}

// dx[M, K] = dy[M, N] w[N, K]
inline GemmPlan linear_backward_input(std::int64_t M, std::int64_t N, std::int64_t K) {
  return {Trans::none, Trans::none, K, M, N, Operand::w, Operand::dy, Operand::dx,
          K, N, K, 1.0f, 0.0f};
}

// dw[N, K] (+)= dy[M, N]^T x[M, K]
inline GemmPlan linear_backward_weight(std::int64_t M, std::int64_t N, std::int64_t K,
                                       bool accumulate) {
  return {Trans::none, Trans::transpose, K, N, M, Operand::x, Operand::dy, Operand::dw,
          K, N, K, 1.0f, accumulate ? 1.0f : 0.0f};
}

}  // namespace codistill::kernels::cuda::plans
