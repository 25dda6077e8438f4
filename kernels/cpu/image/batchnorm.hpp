#pragma once
// Batch normalization on the CPU (semantics: BatchNormShape in kernels/ops.hpp). x, y, dy,
// dx are [batch, channels, spatial] contiguous; gamma, beta, the running statistics and
// save_mean/save_invstd are [channels]. Statistics are accumulated in double in both
// implementations; the fast path runs channels in parallel and its inner loops vectorize.
// A fused relu (Op::batchnorm_activation): the forward's act = relu writes relu(bn(x)); the
// backward's relu_y = that output, whose mask y > 0 applies to dy inside its own passes.
#include "kernels/cpu/impl.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cpu {

template <class T>
void batchnorm_forward(const T* x, const T* gamma, const T* beta, T* running_mean, T* running_var, T* y,
                       T* save_mean, T* save_invstd, bool training, const BatchNormShape& s,
                       Impl impl = Impl::fast, Activation act = Activation::none);

// dx may be null (the input needs no gradient); dgamma and dbeta accumulate. relu_y: null,
// or the output of a forward with act = relu.
template <class T>
void batchnorm_backward(const T* x, const T* gamma, const T* save_mean, const T* save_invstd, const T* dy, T* dx,
                        T* dgamma, T* dbeta, bool training, const BatchNormShape& s, Impl impl = Impl::fast,
                        const T* relu_y = nullptr);

}  // namespace codistill::kernels::cpu
