#pragma once
// Synchronized batch normalization on the CPU: the three steps of Op::batchnorm_sync
// (arithmetic in kernels/ops.hpp), around the all-reduce of `sums` ([2C + 1] double) that
// the caller makes between the ranks of a group. Layouts as kernels/cpu/image/batchnorm.hpp.
// Sums are accumulated in double; the reference runs channels one after another, the
// fast path in parallel (each channel's arithmetic is the same, so both give the same
// bits).
#include "kernels/cpu/impl.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cpu {

// Forward (dy null): sums of x - center and its square. Backward (dy given): sums of dy and
// dy * (x - center) * invstd (center = save_mean, invstd = save_invstd).
template <class T>
void batchnorm_sums(const T* x, const T* dy, const T* center, const T* invstd, double* sums,
                    const BatchNormShape& s, Impl impl = Impl::fast);

template <class T>
void batchnorm_forward_synced(const T* x, const T* gamma, const T* beta, T* running_mean, T* running_var,
                              const double* sums, T* y, T* save_mean, T* save_invstd, const BatchNormShape& s,
                              Impl impl = Impl::fast);

// dx may be null; dgamma and dbeta accumulate the local sums.
template <class T>
void batchnorm_backward_synced(const T* x, const T* gamma, const T* save_mean, const T* save_invstd, const T* dy,
                               const double* local_sums, const double* sums, T* dx, T* dgamma, T* dbeta,
                               const BatchNormShape& s, Impl impl = Impl::fast);

}  // namespace codistill::kernels::cpu
