#pragma once
// 2-D convolution (cross-correlation, as PyTorch), NCHW, weight [O, C, KH, KW].
//   forward:  y[B,O,OH,OW] = conv(x[B,C,H,W], w) + b[O]   (b may be null)
//   backward: dx (skipped when null), dw (+)= , db (+)=  (db may be null)
// OH = (H + 2*pad_h - KH) / stride_h + 1, likewise OW.
// s.channels_last (x, y, dx, dy stored NHWC): computed in NCHW between exact permutations
// (kernels/cpu/image/nhwc.hpp); the float32 fast path (DnnlConv) takes NHWC as it is.
// fast: per image im2col + GEMM, images spread over OpenMP threads (small maps: several
// images per GEMM). Each thread keeps its im2col scratch between calls (thread_local).
// A batch smaller than the thread count runs on that many threads. The weight gradient is
// reduced over threads in a fixed order: bit-identical run to run for a given thread count.
// The backend's entry points, which pick oneDNN or these, are at the end of dnnl_conv.cpp.
#include <cstdint>

#include "kernels/cpu/impl.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cpu {

using Conv2dShape = kernels::Conv2dShape;  // kernels/ops.hpp

template <class T>
void conv2d_forward(const T* x, const T* w, const T* b, T* y, const Conv2dShape& s,
                    Impl impl = Impl::fast);

template <class T>
void conv2d_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db,
                     const Conv2dShape& s, bool accumulate, Impl impl = Impl::fast);

}  // namespace codistill::kernels::cpu
