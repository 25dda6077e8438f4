#include "codistill/nn/relu.hpp"

#include <stdexcept>

#include "codistill/nn/buffer.hpp"
#include "kernels/cpu/activation.hpp"

namespace codistill {

using kernels::Tensor;

Tensor ReLU::forward(const Tensor& x, bool /*training*/) {
  nn::check_cpu_dtype(x, x.dtype(), "relu");
  nn::ensure_buffer(y_, x.shape(), x.dtype());
  kernels::dispatch_floating(x.dtype(), [&]<class T>() {
    kernels::cpu::relu_forward<T>(x.data<T>(), y_.data<T>(), x.numel(), impl_);
  });
  return y_;
}

Tensor ReLU::backward(const Tensor& dy, bool need_dx) {
  if (!y_.defined()) throw std::logic_error("relu: backward before forward");
  kernels::check_shape(dy, y_.shape(), "relu backward: dy");
  nn::check_cpu_dtype(dy, y_.dtype(), "relu backward");
  if (!need_dx) return {};
  nn::ensure_buffer(dx_, y_.shape(), y_.dtype());
  kernels::dispatch_floating(dy.dtype(), [&]<class T>() {
    kernels::cpu::relu_backward<T>(y_.data<T>(), dy.data<T>(), dx_.data<T>(), dy.numel(), impl_);
  });
  return dx_;
}

}  // namespace codistill
