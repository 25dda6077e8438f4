#pragma once
// General matrix multiply, row-major:  C[M,N] = alpha * op(A) * op(B) + beta * C
// op(A) is A[M,K] (trans_a = false) or A[K,M]^T; op(B) is B[K,N] or B[N,K]^T.
// fast: float32 on oneDNN's sgemm (AVX-512 here), float64 on OpenBLAS; the work split across
// OpenMP threads along M or N (whichever gives the smaller largest block; the larger on a
// tie), one serial library call per thread.
// beta = 0 overwrites C (its old contents, NaN included, are never read).
#include <cstdint>

#include "kernels/cpu/impl.hpp"

namespace codistill::kernels::cpu {

template <class T>
void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, T alpha,
          const T* A, const T* B, T beta, T* C, Impl impl = Impl::fast);

// One single-threaded library call (as gemm's) with explicit leading dimensions (row-major), for
// callers that already spread their work over OpenMP threads (conv2d: one image per
// thread). Same semantics as gemm; lda/ldb/ldc are the row strides of A, B, C as stored.
template <class T>
void gemm_serial(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
                 T alpha, const T* A, std::int64_t lda, const T* B, std::int64_t ldb, T beta, T* C,
                 std::int64_t ldc);

// How gemm's fast path splits C over threads, for callers that run several GEMMs (and
// their own loops) in one parallel region of theirs: part p of `parts` computes a block of
// rows (split_m) or columns of C. gemm_split(..., threads) gives the split gemm would use
// with that many threads (fewer parts for small GEMMs: a fork costs more than it saves), so
// a part computes exactly the bits gemm computes for that block. gemm_split throws
// std::invalid_argument on sizes the libraries cannot take.
struct GemmSplit {
  int parts = 1;
  bool split_m = true;
  std::int64_t len = 0, align = 16;
};
template <class T>
GemmSplit gemm_split(std::int64_t M, std::int64_t N, std::int64_t K, int threads);
// Part p of split s of the fast path's C = alpha op(A) op(B) + beta C (sizes as given to
// gemm_split, which checked them: nothing here throws). A no-op for an empty part.
template <class T>
void gemm_part(const GemmSplit& s, int p, bool trans_a, bool trans_b, std::int64_t M, std::int64_t N,
               std::int64_t K, T alpha, const T* A, const T* B, T beta, T* C);

}  // namespace codistill::kernels::cpu
