#include "codistill/nn/relu.hpp"

#include <stdexcept>

#include "codistill/nn/buffer.hpp"
#include "kernels/cpu/activation.hpp"
#include "kernels/cuda/bias_activation.hpp"

namespace codistill {

using kernels::Tensor;

Tensor ReLU::forward(const Tensor& x, bool /*training*/) {
  nn::check_input(x, x.dtype(), device_, "relu");
  if (passthrough_) return x;  // applied by the Linear before (CUDA fusion)
  nn::ensure_buffer(y_, x.shape(), x.dtype(), device_);
  if (device_.is_cuda()) {
    kernels::cuda::activation_forward(x.data<float>(), y_.data<float>(), x.numel(), kernels::cuda::Activation::relu,
                                      ctx_);
    return y_;
  }
  kernels::dispatch_floating(x.dtype(), [&]<class T>() {
    kernels::cpu::relu_forward<T>(x.data<T>(), y_.data<T>(), x.numel(), impl_);
  });
  return y_;
}

Tensor ReLU::backward(const Tensor& dy, bool need_dx) {
  if (passthrough_) return need_dx ? dy : Tensor{};
  if (!y_.defined()) throw std::logic_error("relu: backward before forward");
  kernels::check_shape(dy, y_.shape(), "relu backward: dy");
  nn::check_input(dy, y_.dtype(), device_, "relu backward");
  if (!need_dx) return {};
  nn::ensure_buffer(dx_, y_.shape(), y_.dtype(), device_);
  if (device_.is_cuda()) {
    kernels::cuda::activation_backward(y_.data<float>(), dy.data<float>(), dx_.data<float>(), dy.numel(),
                                       kernels::cuda::Activation::relu, ctx_);
    return dx_;
  }
  kernels::dispatch_floating(dy.dtype(), [&]<class T>() {
    kernels::cpu::relu_backward<T>(y_.data<T>(), dy.data<T>(), dx_.data<T>(), dy.numel(), impl_);
  });
  return dx_;
}

}  // namespace codistill
