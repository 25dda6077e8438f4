#pragma once
// Max pooling, NCHW, no padding. Ties go to the first maximum in row-major window order;
// a NaN is a window's maximum (the first NaN wins), as cuDNN propagates it.
//   forward:  y[B,C,OH,OW], argmax[B,C,OH,OW] = flat index h*W+w of the max within its plane
//   backward: dx[B,C,H,W] = 0, then dx[argmax] += dy   (dx is overwritten; the reference
//             checks each argmax is inside its plane, the fast path trusts forward's output)
// OH = (H - K) / stride + 1.
#include <cstdint>

#include "kernels/cpu/impl.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cpu {

using Pool2dShape = kernels::Pool2dShape;  // kernels/ops.hpp

template <class T>
void maxpool2d_forward(const T* x, T* y, std::int32_t* argmax, const Pool2dShape& s,
                       Impl impl = Impl::fast);
template <class T>
void maxpool2d_backward(const T* dy, const std::int32_t* argmax, T* dx, const Pool2dShape& s,
                        Impl impl = Impl::fast);

}  // namespace codistill::kernels::cpu
