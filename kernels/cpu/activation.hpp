#pragma once
// Elementwise activations over n elements. y may alias x; dx may alias dy.
//   relu:  y = max(x, 0);            backward uses y (dx = dy * [y > 0])
//   gelu:  y = x * Phi(x) (exact, erf form, as PyTorch's default); backward uses x
//   silu:  y = x * sigmoid(x) (PyTorch's SiLU); backward uses x:
//          dx = dy * s * (1 + x * (1 - s)), s = sigmoid(x)
//   gelu_tanh: y = x / 2 (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
//          (GELU's tanh approximation: GPT-2's, PyTorch's approximate='tanh'); backward uses x:
//          dx = dy * (s + 2 x s (1 - s) u'), s = sigmoid(2u), u' = sqrt(2/pi) (1 + 3 0.044715 x^2)
#include <cstdint>

#include "kernels/cpu/impl.hpp"

namespace codistill::kernels::cpu {

template <class T>
void relu_forward(const T* x, T* y, std::int64_t n, Impl impl = Impl::fast);
template <class T>
void relu_backward(const T* y, const T* dy, T* dx, std::int64_t n, Impl impl = Impl::fast);
// relu_backward's fast loop on the calling thread alone (a thread's share inside a
// parallel region of its own: linear_backward_relu).
template <class T>
void relu_backward_span(const T* y, const T* dy, T* dx, std::int64_t n);
template <class T>
void gelu_forward(const T* x, T* y, std::int64_t n, Impl impl = Impl::fast);
template <class T>
void gelu_backward(const T* x, const T* dy, T* dx, std::int64_t n, Impl impl = Impl::fast);
template <class T>
void silu_forward(const T* x, T* y, std::int64_t n, Impl impl = Impl::fast);
template <class T>
void silu_backward(const T* x, const T* dy, T* dx, std::int64_t n, Impl impl = Impl::fast);
template <class T>
void gelu_tanh_forward(const T* x, T* y, std::int64_t n, Impl impl = Impl::fast);
template <class T>
void gelu_tanh_backward(const T* x, const T* dy, T* dx, std::int64_t n, Impl impl = Impl::fast);

}  // namespace codistill::kernels::cpu
