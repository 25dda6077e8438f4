#pragma once
// Batch normalization on CUDA, float32, with the semantics of BatchNormShape
// (kernels/ops.hpp) and the CPU twin kernels/cpu/image/batchnorm.hpp; the kernels are in
// device/batchnorm.cuh, the launch shape is shapes::batchnorm. A fused relu
// (Op::batchnorm_activation), as the CPU twin: the forward's `relu` writes relu(bn(x)); the
// backward's relu_y (that output; null: none) masks dy with y > 0 in its own passes.
#include "kernels/cuda/context.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cuda {

void batchnorm_forward(const float* x, const float* gamma, const float* beta, float* running_mean,
                       float* running_var, float* y, float* save_mean, float* save_invstd, bool training,
                       const BatchNormShape& s, const Context& ctx, bool relu = false);
void batchnorm_backward(const float* x, const float* gamma, const float* save_mean, const float* save_invstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, bool training,
                        const BatchNormShape& s, const Context& ctx, const float* relu_y = nullptr);

}  // namespace codistill::kernels::cuda
