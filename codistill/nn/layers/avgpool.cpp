#include "codistill/nn/layers/avgpool.hpp"

#include <stdexcept>

namespace codistill {

using kernels::Shape;
using kernels::Tensor;

Shape GlobalAvgPool::output_shape(const Shape& input) const {
  if (input.size() != 3)
    throw std::invalid_argument("global_avgpool: expected input [C, H, W], got " + kernels::shape_str(input));
  return {input[0]};
}

Tensor GlobalAvgPool::do_forward(const Tensor& x, bool /*training*/) {
  if (x.ndim() != 4)
    throw std::invalid_argument("global_avgpool: expected input [B, C, H, W], got " + kernels::shape_str(x.shape()));
  in_shape_ = x.shape();
  ensure(y_, {x.dim(0), x.dim(1)}, x.dtype());
  const std::int64_t B = x.dim(0), C = x.dim(1), S = x.dim(2) * x.dim(3);
  if (channels_last_)
    backend().global_avgpool_forward(x, y_, B, S, C, queue());
  else
    backend().global_avgpool_forward(x, y_, B * C, S, 1, queue());
  return y_;
}

Tensor GlobalAvgPool::do_backward(const Tensor& dy, bool need_dx) {
  if (in_shape_.empty()) throw std::logic_error("global_avgpool: backward before forward");
  kernels::check_shape(dy, {in_shape_[0], in_shape_[1]}, "global_avgpool backward: dy");
  if (!need_dx) return Tensor{};
  ensure(dx_, in_shape_, dy.dtype());
  const std::int64_t B = in_shape_[0], C = in_shape_[1], S = in_shape_[2] * in_shape_[3];
  if (channels_last_)
    backend().global_avgpool_backward(dy, dx_, B, S, C, queue());
  else
    backend().global_avgpool_backward(dy, dx_, B * C, S, 1, queue());
  return dx_;
}

}  // namespace codistill
