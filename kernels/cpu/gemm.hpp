#pragma once
// General matrix multiply, row-major:  C[M,N] = alpha * op(A) * op(B) + beta * C
// op(A) is A[M,K] (trans_a = false) or A[K,M]^T; op(B) is B[K,N] or B[N,K]^T.
// fast: OpenBLAS, the work split across OpenMP threads along the larger of M and N.
#include <cstdint>

#include "kernels/cpu/impl.hpp"

namespace codistill::kernels::cpu {

template <class T>
void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, T alpha,
          const T* A, const T* B, T beta, T* C, Impl impl = Impl::fast);

}  // namespace codistill::kernels::cpu
