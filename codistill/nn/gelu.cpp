#include "codistill/nn/gelu.hpp"

#include <stdexcept>

#include "codistill/nn/buffer.hpp"
#include "kernels/cpu/activation.hpp"
#include "kernels/cuda/bias_activation.hpp"

namespace codistill {

using kernels::Tensor;

Tensor GELU::forward(const Tensor& x, bool /*training*/) {
  nn::check_input(x, x.dtype(), device_, "gelu");
  if (passthrough_) return x;  // applied by the Linear before (CUDA fusion)
  x_ = x;
  nn::ensure_buffer(y_, x.shape(), x.dtype(), device_);
  if (device_.is_cuda()) {
    kernels::cuda::activation_forward(x.data<float>(), y_.data<float>(), x.numel(), kernels::cuda::Activation::gelu,
                                      ctx_);
    return y_;
  }
  kernels::dispatch_floating(x.dtype(), [&]<class T>() {
    kernels::cpu::gelu_forward<T>(x.data<T>(), y_.data<T>(), x.numel(), impl_);
  });
  return y_;
}

Tensor GELU::backward(const Tensor& dy, bool need_dx) {
  if (passthrough_) return need_dx ? dy : Tensor{};
  if (!x_.defined()) throw std::logic_error("gelu: backward before forward");
  kernels::check_shape(dy, x_.shape(), "gelu backward: dy");
  nn::check_input(dy, x_.dtype(), device_, "gelu backward");
  if (!need_dx) return {};
  nn::ensure_buffer(dx_, x_.shape(), x_.dtype(), device_);
  if (device_.is_cuda()) {
    kernels::cuda::activation_backward(x_.data<float>(), dy.data<float>(), dx_.data<float>(), dy.numel(),
                                       kernels::cuda::Activation::gelu, ctx_);
    return dx_;
  }
  kernels::dispatch_floating(dy.dtype(), [&]<class T>() {
    kernels::cpu::gelu_backward<T>(x_.data<T>(), dy.data<T>(), dx_.data<T>(), dy.numel(), impl_);
  });
  return dx_;
}

}  // namespace codistill
