#include "codistill/nn/layers/conv2d.hpp"

#include <stdexcept>

#include "codistill/nn/init.hpp"

namespace codistill {

using kernels::Shape;
using kernels::Tensor;

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size,
               std::int64_t stride, std::int64_t padding, bool bias)
    : in_(in_channels),
      out_(out_channels),
      k_(kernel_size),
      stride_(stride),
      pad_(padding == kSamePadding ? kernel_size / 2 : padding),
      has_bias_(bias) {
  if (in_ < 1 || out_ < 1 || k_ < 1 || stride_ < 1 || pad_ < 0)
    throw std::invalid_argument(
        "conv2d: need in, out channels, kernel and stride >= 1 and padding >= 0, got in " +
        std::to_string(in_) + ", out " + std::to_string(out_) + ", kernel " + std::to_string(k_) +
        ", stride " + std::to_string(stride_) + ", padding " + std::to_string(pad_));
  w_ = Tensor::zeros({out_, in_, k_, k_});
  dw_ = Tensor::zeros({out_, in_, k_, k_});
  if (has_bias_) {
    b_ = Tensor::zeros({out_});
    db_ = Tensor::zeros({out_});
  }
}

kernels::Conv2dShape Conv2d::conv_shape(const Shape& x) const {
  kernels::Conv2dShape s;
  s.batch = x[0];
  s.in_channels = x[1];
  s.height = x[2];
  s.width = x[3];
  s.out_channels = out_;
  s.kernel_h = s.kernel_w = k_;
  s.stride_h = s.stride_w = stride_;
  s.pad_h = s.pad_w = pad_;
  s.channels_last = channels_last_;
  return s;
}

Shape Conv2d::output_shape(const Shape& input) const {
  if (input.size() != 3 || input[0] != in_)
    throw std::invalid_argument("conv2d: expected input [" + std::to_string(in_) +
                                ", H, W], got " + kernels::shape_str(input));
  // Checked before dividing: C++ division truncates toward zero, so a negative numerator
  // would otherwise look like a valid size of 1.
  const std::int64_t h = input[1] + 2 * pad_ - k_, w = input[2] + 2 * pad_ - k_;
  if (input[1] < 1 || input[2] < 1 || h < 0 || w < 0)
    throw std::invalid_argument("conv2d: kernel " + std::to_string(k_) + " with padding " +
                                std::to_string(pad_) + " does not fit input " +
                                kernels::shape_str(input));
  return {out_, h / stride_ + 1, w / stride_ + 1};
}

Tensor Conv2d::do_forward(const Tensor& x, bool /*training*/) {
  if (x.ndim() != 4)
    throw std::invalid_argument("conv2d: expected input [B, C, H, W], got " +
                                kernels::shape_str(x.shape()));
  Shape out = output_shape({x.dim(1), x.dim(2), x.dim(3)});
  last_ = conv_shape(x.shape());
  x_ = x;
  ensure(y_, {x.dim(0), out[0], out[1], out[2]}, x.dtype());
  backend().conv2d_forward(x, w_, has_bias_ ? &b_ : nullptr, y_, last_, queue());
  return y_;
}

Tensor Conv2d::do_backward(const Tensor& dy, bool need_dx) {
  if (!x_.defined()) throw std::logic_error("conv2d: backward before forward");
  if (!dw_.defined()) throw std::logic_error("conv2d: backward on a forward-only copy (no grads)");
  kernels::check_shape(dy, y_.shape(), "conv2d backward: dy");
  if (need_dx) ensure(dx_, x_.shape(), x_.dtype());
  backend().conv2d_backward(x_, w_, dy, need_dx ? &dx_ : nullptr, dw_, has_bias_ ? &db_ : nullptr, last_, queue());
  return need_dx ? dx_ : Tensor{};
}

std::vector<Param> Conv2d::params() {
  std::vector<Param> p{{"weight", &w_, &dw_}};
  if (has_bias_) p.push_back({"bias", &b_, &db_});
  return p;
}

void Conv2d::init_params(Rng& rng, const std::string& init) {
  nn::init_weight_bias(w_, has_bias_ ? &b_ : nullptr, in_ * k_ * k_, out_ * k_ * k_, rng, init);
}

// y and dx (the default), and the backend's scratch for this shape (oneDNN's on the CPU).
ActivationBytes Conv2d::plan_activations(const kernels::Shape& x, bool training, bool need_dx) {
  ActivationBytes a = Module::plan_activations(x, training, need_dx);
  a.workspace = backend().conv2d_workspace(conv_shape(x), has_bias_, training, queue());
  return a;
}

// Recompute (Module::set_recompute): the next forward allocates these again.
void Conv2d::release_activations() {
  drop(x_);
  drop(y_);
  drop(dx_);
}

}  // namespace codistill
