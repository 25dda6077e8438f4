#pragma once
// Layer normalization on CUDA, float32 (semantics: LayerNormShape in kernels/ops.hpp; the
// CPU twin kernels/cpu/sequence/layernorm.hpp; kernels in device/layernorm.cuh).
#include "kernels/cuda/context.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cuda {

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* save_mean,
                       float* save_invstd, const LayerNormShape& s, const Context& ctx);
void layernorm_backward(const float* x, const float* gamma, const float* save_mean, const float* save_invstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, const LayerNormShape& s,
                        const Context& ctx);

}  // namespace codistill::kernels::cuda
