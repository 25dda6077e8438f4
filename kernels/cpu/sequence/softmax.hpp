#pragma once
// Row softmax over x[M,N] (numerically stable: max subtracted).
//   forward:  y = softmax(x) per row (y may alias x)
//   backward: dx = y * (dy - sum_j dy_j y_j) per row
#include <cstdint>

#include "kernels/cpu/impl.hpp"

namespace codistill::kernels::cpu {

template <class T>
void softmax_forward(const T* x, T* y, std::int64_t M, std::int64_t N, Impl impl = Impl::fast);
template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, std::int64_t M, std::int64_t N,
                      Impl impl = Impl::fast);

}  // namespace codistill::kernels::cpu
