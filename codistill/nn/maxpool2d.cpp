#include "codistill/nn/maxpool2d.hpp"

#include <stdexcept>

#include "codistill/nn/buffer.hpp"
#include "kernels/cuda/conv2d.hpp"

namespace codistill {

using kernels::Shape;
using kernels::Tensor;

MaxPool2d::MaxPool2d(std::int64_t kernel_size, std::int64_t stride)
    : k_(kernel_size), stride_(stride == 0 ? kernel_size : stride) {
  if (k_ < 1 || stride_ < 1)
    throw std::invalid_argument("maxpool2d: kernel and stride must be >= 1, got kernel " +
                                std::to_string(k_) + ", stride " + std::to_string(stride_));
}

Shape MaxPool2d::output_shape(const Shape& input) const {
  if (input.size() != 3)
    throw std::invalid_argument("maxpool2d: expected input [C, H, W], got " + kernels::shape_str(input));
  if (input[0] < 1 || input[1] < k_ || input[2] < k_)
    throw std::invalid_argument("maxpool2d: window " + std::to_string(k_) + "x" + std::to_string(k_) +
                                " does not fit input " + kernels::shape_str(input) +
                                " (output would be below 1x1)");
  return {input[0], (input[1] - k_) / stride_ + 1, (input[2] - k_) / stride_ + 1};
}

Tensor MaxPool2d::forward(const Tensor& x, bool /*training*/) {
  nn::check_input(x, x.dtype(), device_, "maxpool2d");
  if (x.ndim() != 4)
    throw std::invalid_argument("maxpool2d: expected input [B, C, H, W], got " +
                                kernels::shape_str(x.shape()));
  Shape out = output_shape({x.dim(1), x.dim(2), x.dim(3)});
  last_ = kernels::cpu::Pool2dShape{x.dim(0), x.dim(1), x.dim(2), x.dim(3), k_, stride_};
  x_shape_ = x.shape();
  nn::ensure_buffer(y_, {x.dim(0), out[0], out[1], out[2]}, x.dtype(), device_);
  if (device_.is_cuda()) {
    x_ = x;  // cuDNN's backward finds the maxima again from x and y (no argmax kept)
    kernels::cuda::maxpool2d_forward(x.data<float>(), y_.data<float>(), last_, ctx_);
    return y_;
  }
  argmax_.resize(static_cast<std::size_t>(y_.numel()));
  kernels::dispatch_floating(x.dtype(), [&]<class T>() {
    kernels::cpu::maxpool2d_forward<T>(x.data<T>(), y_.data<T>(), argmax_.data(), last_, impl_);
  });
  return y_;
}

Tensor MaxPool2d::backward(const Tensor& dy, bool need_dx) {
  if (x_shape_.empty()) throw std::logic_error("maxpool2d: backward before forward");
  kernels::check_shape(dy, y_.shape(), "maxpool2d backward: dy");
  nn::check_input(dy, y_.dtype(), device_, "maxpool2d backward");
  if (!need_dx) return {};
  nn::ensure_buffer(dx_, x_shape_, dy.dtype(), device_);
  if (device_.is_cuda()) {
    kernels::cuda::maxpool2d_backward(x_.data<float>(), y_.data<float>(), dy.data<float>(), dx_.data<float>(), last_,
                                      ctx_);
    return dx_;
  }
  kernels::dispatch_floating(dy.dtype(), [&]<class T>() {
    kernels::cpu::maxpool2d_backward<T>(dy.data<T>(), argmax_.data(), dx_.data<T>(), last_, impl_);
  });
  return dx_;
}

}  // namespace codistill
