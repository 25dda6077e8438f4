// Fully connected layer through cuBLAS (linear.hpp).
//
// cuBLAS is column-major; our matrices are row-major. A row-major [r, c] matrix is, byte
// for byte, the column-major [c, r] matrix (its transpose), so each product is computed
// transposed, with no copy:
//   y  = x w^T     ->  y^T  (N x M) = w (op T of the col-major K x N view) * x^T (K x M)
//   dx = dy w      ->  dx^T (K x M) = w^T (K x N) * dy^T (N x M)
//   dw = dy^T x    ->  dw^T (K x N) = x^T (K x M) * dy (op T of the col-major N x M view)
// The bias and its gradient go through bias_activation.cu (deterministic column sums).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <string>

#include "kernels/cuda/bias_activation.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/linear.hpp"
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

// C (m x n, col-major, ldc) = alpha op(A) op(B) + beta C, float32 in and out. TF32 tensor
// cores only when the context allows them: plain float32 keeps results within float
// tolerance of the CPU.
void gemm(const Context& ctx, cublasOperation_t ta, cublasOperation_t tb, std::int64_t m,
          std::int64_t n, std::int64_t k, const float* A, std::int64_t lda, const float* B,
          std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  cublasHandle_t h = handle_for(ctx);
  const float alpha = 1.0f;
  const cublasComputeType_t compute =
      ctx.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CODISTILL_CUBLAS_CHECK(cublasGemmEx(h, ta, tb, static_cast<int>(m), static_cast<int>(n),
                                      static_cast<int>(k), &alpha, A, CUDA_R_32F,
                                      static_cast<int>(lda), B, CUDA_R_32F, static_cast<int>(ldb),
                                      &beta, C, CUDA_R_32F, static_cast<int>(ldc), compute,
                                      CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void linear_forward(const float* x, const float* w, const float* b, float* y, std::int64_t M,
                    std::int64_t N, std::int64_t K, const Context& ctx) {
  check_sizes("linear_forward", M, N, K);
  if (M == 0) return;  // an empty batch: nothing to write
  gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, w, K, x, K, 0.0f, y, N);
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
  if (dx) gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, w, K, dy, N, 0.0f, dx, K);
  gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, x, K, dy, N, accumulate ? 1.0f : 0.0f, dw, K);
  if (db)
    bias_activation_backward(dy, nullptr, nullptr, db, M, N, Activation::none, accumulate, ctx);
}

}  // namespace codistill::kernels::cuda
