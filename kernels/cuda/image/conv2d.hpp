#pragma once
// Convolution (through cuDNN) and max pooling (pool.cu) on CUDA, float32 NCHW, with the
// shapes of kernels/ops.hpp and the semantics of kernels/cpu/image/conv2d.hpp and
// kernels/cpu/image/pool.hpp (the tests' references). Convolution descriptors and the chosen
// algorithms are cached per shape by the queue (ctx.resources); workspace is the queue's
// scratch. TF32 (CUDNN_TENSOR_OP_MATH) only when ctx.allow_tf32.
//   conv2d_forward:  y = conv(x, w) (+ b)
//   conv2d_backward: dx (skipped when null), dw (+)=, db (+)= (db may be null)
//   maxpool2d_forward:  y = max over each window (ties: the first in row-major order; a NaN
//                       is the maximum, as kernels/ops.hpp says)
//   maxpool2d_backward: dx = dy routed to the maxima, overwritten; the maxima are found
//                       again from x (y is not needed), so no argmax is kept
// Errors throw std::runtime_error with file, line and cuDNN's message.
#include "kernels/cuda/context.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cuda {

void conv2d_forward(const float* x, const float* w, const float* b, float* y,
                    const Conv2dShape& s, const Context& ctx);
void conv2d_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* db, const Conv2dShape& s, bool accumulate, const Context& ctx);

void maxpool2d_forward(const float* x, float* y, const Pool2dShape& s, const Context& ctx);
void maxpool2d_backward(const float* x, const float* y, const float* dy, float* dx,
                        const Pool2dShape& s, const Context& ctx);

}  // namespace codistill::kernels::cuda
