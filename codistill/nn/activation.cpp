#include "codistill/nn/activation.hpp"

#include <stdexcept>

#include "codistill/nn/buffer.hpp"
#include "kernels/cpu/activation.hpp"

namespace codistill {

using kernels::Tensor;
using kernels::cuda::Activation;

std::string ActivationLayer::kind() const { return act_ == Activation::relu ? "relu" : "gelu"; }

Tensor ActivationLayer::forward(const Tensor& x, bool /*training*/) {
  const std::string name = kind();
  nn::check_input(x, x.dtype(), device_, name.c_str());
  if (passthrough_) return x;  // applied by the Linear before (CUDA fusion)
  nn::ensure_buffer(y_, x.shape(), x.dtype(), device_);
  saved_ = act_ == Activation::relu ? y_ : x;
  if (device_.is_cuda()) {
    kernels::cuda::activation_forward(x.data<float>(), y_.data<float>(), x.numel(), act_, ctx_);
    return y_;
  }
  kernels::dispatch_floating(x.dtype(), [&]<class T>() {
    if (act_ == Activation::relu) kernels::cpu::relu_forward<T>(x.data<T>(), y_.data<T>(), x.numel(), impl_);
    else kernels::cpu::gelu_forward<T>(x.data<T>(), y_.data<T>(), x.numel(), impl_);
  });
  return y_;
}

Tensor ActivationLayer::backward(const Tensor& dy, bool need_dx) {
  if (passthrough_) return need_dx ? dy : Tensor{};
  const std::string name = kind();
  if (!saved_.defined()) throw std::logic_error(name + ": backward before forward");
  kernels::check_shape(dy, saved_.shape(), (name + " backward: dy").c_str());
  nn::check_input(dy, saved_.dtype(), device_, (name + " backward").c_str());
  if (!need_dx) return {};
  nn::ensure_buffer(dx_, saved_.shape(), saved_.dtype(), device_);
  if (device_.is_cuda()) {
    kernels::cuda::activation_backward(saved_.data<float>(), dy.data<float>(), dx_.data<float>(), dy.numel(),
                                       act_, ctx_);
    return dx_;
  }
  kernels::dispatch_floating(dy.dtype(), [&]<class T>() {
    if (act_ == Activation::relu)
      kernels::cpu::relu_backward<T>(saved_.data<T>(), dy.data<T>(), dx_.data<T>(), dy.numel(), impl_);
    else kernels::cpu::gelu_backward<T>(saved_.data<T>(), dy.data<T>(), dx_.data<T>(), dy.numel(), impl_);
  });
  return dx_;
}

}  // namespace codistill
