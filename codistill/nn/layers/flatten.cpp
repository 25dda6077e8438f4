#include "codistill/nn/layers/flatten.hpp"

#include <stdexcept>
#include "codistill/nn/activation_plan.hpp"

namespace codistill {

using kernels::Shape;
using kernels::Tensor;

Shape Flatten::output_shape(const Shape& input) const {
  if (input.empty()) throw std::invalid_argument("flatten: empty input shape");
  return {kernels::shape_numel(input)};
}

Tensor Flatten::do_forward(const Tensor& x, bool /*training*/) {
  if (x.ndim() < 1) throw std::invalid_argument("flatten: expected input [B, ...], got a scalar");
  x_shape_ = x.shape();
  // Features computed explicitly (not -1) so that an empty batch still reshapes.
  const Shape rest(x_shape_.begin() + 1, x_shape_.end());
  return x.reshape({x.dim(0), kernels::shape_numel(rest)});
}

Tensor Flatten::do_backward(const Tensor& dy, bool need_dx) {
  if (x_shape_.empty()) throw std::logic_error("flatten: backward before forward");
  if (dy.numel() != kernels::shape_numel(x_shape_) || dy.ndim() < 1 || dy.dim(0) != x_shape_[0])
    throw std::invalid_argument("flatten backward: dy " + kernels::shape_str(dy.shape()) +
                                " does not match input " + kernels::shape_str(x_shape_));
  if (!need_dx) return {};
  return dy.reshape(x_shape_);
}

// A reshape of its input, in both directions: no buffers.
ActivationBytes Flatten::plan_activations(const kernels::Shape& x, bool /*training*/, bool /*need_dx*/) {
  return {0, 0, nn::batched_output(*this, x)};
}

}  // namespace codistill
