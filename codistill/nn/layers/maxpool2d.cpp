#include "codistill/nn/layers/maxpool2d.hpp"

#include <stdexcept>
#include "codistill/nn/activation_plan.hpp"


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

Tensor MaxPool2d::do_forward(const Tensor& x, bool /*training*/) {
  if (x.ndim() != 4)
    throw std::invalid_argument("maxpool2d: expected input [B, C, H, W], got " +
                                kernels::shape_str(x.shape()));
  Shape out = output_shape({x.dim(1), x.dim(2), x.dim(3)});
  last_ = kernels::Pool2dShape{x.dim(0), x.dim(1), x.dim(2), x.dim(3), k_, stride_};
  x_ = x;
  ensure(y_, {x.dim(0), out[0], out[1], out[2]}, x.dtype());
  backend().maxpool2d_forward(x, y_, argmax_, last_, queue());
  return y_;
}

Tensor MaxPool2d::do_backward(const Tensor& dy, bool need_dx) {
  if (!x_.defined()) throw std::logic_error("maxpool2d: backward before forward");
  kernels::check_shape(dy, y_.shape(), "maxpool2d backward: dy");
  if (!need_dx) return {};
  ensure(dx_, x_.shape(), dy.dtype());
  backend().maxpool2d_backward(x_, y_, argmax_, dy, dx_, last_, queue());
  return dx_;
}

// y and the backend's int32 arg-max of each output (the CPU's and CUDA's keep one), dx.
ActivationBytes MaxPool2d::plan_activations(const kernels::Shape& x, bool training, bool need_dx) {
  ActivationBytes a = Module::plan_activations(x, training, need_dx);
  a.forward += kernels::shape_numel(a.output) * 4;
  return a;
}

}  // namespace codistill
