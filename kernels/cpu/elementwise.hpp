#pragma once
// Elementwise binary ops over n elements; y may alias an input.
//   multiply: y = x * m   (dropout: m holds 0 or 1/(1-p))
//   add:      y = a + b   (residual connections: body + shortcut, and their gradients)
//   add_relu: y = relu(a + b)   (a residual sum and the relu after it, Op::add_activation)
#include <cstdint>

#include "kernels/cpu/impl.hpp"

namespace codistill::kernels::cpu {

template <class T>
void multiply(const T* x, const T* m, T* y, std::int64_t n, Impl impl = Impl::fast);
template <class T>
void add(const T* a, const T* b, T* y, std::int64_t n, Impl impl = Impl::fast);
template <class T>
void add_relu(const T* a, const T* b, T* y, std::int64_t n, Impl impl = Impl::fast);

}  // namespace codistill::kernels::cpu
