#include "codistill/nn/gelu.hpp"

#include <stdexcept>

#include "codistill/nn/buffer.hpp"
#include "kernels/cpu/activation.hpp"

namespace codistill {

using kernels::Tensor;

Tensor GELU::forward(const Tensor& x, bool /*training*/) {
  nn::check_cpu_dtype(x, x.dtype(), "gelu");
  x_ = x;
  nn::ensure_buffer(y_, x.shape(), x.dtype());
  kernels::dispatch_floating(x.dtype(), [&]<class T>() {
    kernels::cpu::gelu_forward<T>(x.data<T>(), y_.data<T>(), x.numel(), impl_);
  });
  return y_;
}

Tensor GELU::backward(const Tensor& dy, bool need_dx) {
  if (!x_.defined()) throw std::logic_error("gelu: backward before forward");
  kernels::check_shape(dy, x_.shape(), "gelu backward: dy");
  nn::check_cpu_dtype(dy, x_.dtype(), "gelu backward");
  if (!need_dx) return {};
  nn::ensure_buffer(dx_, x_.shape(), x_.dtype());
  kernels::dispatch_floating(dy.dtype(), [&]<class T>() {
    kernels::cpu::gelu_backward<T>(x_.data<T>(), dy.data<T>(), dx_.data<T>(), dy.numel(), impl_);
  });
  return dx_;
}

}  // namespace codistill
