#pragma once
// Bias broadcasts and their gradients.
//   rows:     y[M,N] += b[N];            grad: db[N] (+)= sum_m dy[m,n]
//   channels: y[B,C,S] += b[C] (NCHW with S = H*W);  grad: db[C] (+)= sum_{b,s} dy[b,c,s]
#include <cstdint>

#include "kernels/cpu/impl.hpp"
#include "kernels/cpu/isa.hpp"

namespace codistill::kernels::cpu {

template <class T>
void bias_add_rows(T* y, const T* b, std::int64_t M, std::int64_t N, Impl impl = Impl::fast);
template <class T>
void bias_grad_rows(const T* dy, T* db, std::int64_t M, std::int64_t N, bool accumulate,
                    Impl impl = Impl::fast);
// bias_grad_rows's fast path over columns [n_lo, n_hi) only, on the calling thread (for
// callers that split the columns over threads of their own): every column sums its rows in
// order in double, so any split gives bias_grad_rows's bits. `isa`: chosen_isa(), asked by
// the caller before its parallel region (it throws on a bad CODISTILL_CPU_ISA, and nothing
// may throw inside a region).
template <class T>
void bias_grad_rows_cols(const T* dy, T* db, std::int64_t M, std::int64_t N, std::int64_t n_lo, std::int64_t n_hi,
                         bool accumulate, Isa isa);
template <class T>
void bias_add_channels(T* y, const T* b, std::int64_t B, std::int64_t C, std::int64_t S,
                       Impl impl = Impl::fast);
template <class T>
void bias_grad_channels(const T* dy, T* db, std::int64_t B, std::int64_t C, std::int64_t S,
                        bool accumulate, Impl impl = Impl::fast);

}  // namespace codistill::kernels::cpu
