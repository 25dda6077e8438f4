#pragma once
// Layer normalization on the CPU (semantics: LayerNormShape in kernels/ops.hpp): x, y, dy,
// dx [rows, features] contiguous, gamma/beta/dgamma/dbeta [features], save_mean/save_invstd
// [rows]. Row statistics in double in both implementations; the fast path runs rows in
// parallel (dgamma/dbeta: per-thread partial sums added in thread order, so a run is
// reproducible for a given thread count).
#include "kernels/cpu/impl.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cpu {

template <class T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, T* y, T* save_mean, T* save_invstd,
                       const LayerNormShape& s, Impl impl = Impl::fast);

template <class T>
void layernorm_backward(const T* x, const T* gamma, const T* save_mean, const T* save_invstd, const T* dy, T* dx,
                        T* dgamma, T* dbeta, const LayerNormShape& s, Impl impl = Impl::fast);

}  // namespace codistill::kernels::cpu
