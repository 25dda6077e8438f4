#include "codistill/nn/layers/linear.hpp"

#include <stdexcept>

#include "codistill/nn/activation_plan.hpp"
#include "codistill/nn/init.hpp"

namespace codistill {

using kernels::Activation;
using kernels::Shape;
using kernels::Tensor;

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool bias)
    : in_(in_features), out_(out_features), has_bias_(bias) {
  if (in_ < 1 || out_ < 1)
    throw std::invalid_argument("linear: in and out features must be >= 1, got in " +
                                std::to_string(in_) + ", out " + std::to_string(out_));
  w_ = Tensor::zeros({out_, in_});
  dw_ = Tensor::zeros({out_, in_});
  if (has_bias_) {
    b_ = Tensor::zeros({out_});
    db_ = Tensor::zeros({out_});
  }
}

Shape Linear::output_shape(const Shape& input) const {
  if (kernels::shape_numel(input) != in_ || input.size() != 1)
    throw std::invalid_argument("linear: expected input [" + std::to_string(in_) + "], got " +
                                kernels::shape_str(input));
  return {out_};
}

Tensor Linear::do_forward(const Tensor& x, bool /*training*/) {
  if (x.ndim() != 2 || x.dim(1) != in_)
    throw std::invalid_argument("linear: expected input [B, " + std::to_string(in_) + "], got " +
                                kernels::shape_str(x.shape()));
  const std::int64_t batch = x.dim(0);
  x_ = x;
  ensure(y_, {batch, out_}, x.dtype());
  Tensor* pre = kernels::keeps_input(fused_) ? &ensure(pre_, {batch, out_}, x.dtype()) : nullptr;
  backend().linear_forward(x, w_, has_bias_ ? &b_ : nullptr, y_, fused_, pre, queue());
  return y_;
}

Tensor Linear::do_backward(const Tensor& dy, bool need_dx) {
  if (!x_.defined()) throw std::logic_error("linear: backward before forward");
  if (!dw_.defined()) throw std::logic_error("linear: backward on a forward-only copy (no grads)");
  kernels::check_shape(dy, {x_.dim(0), out_}, "linear backward: dy");
  if (need_dx) ensure(dx_, x_.shape(), x_.dtype());
  const Tensor* saved = nullptr;
  Tensor* dpre = nullptr;
  if (fused_ != Activation::none) {
    // relu's backward reads the output, gelu's (and the others') the pre-activation; dpre has its own buffer
    // (dy belongs to the next layer).
    saved = fused_ == Activation::relu ? &y_ : &pre_;
    dpre = &ensure(dpre_, dy.shape(), dy.dtype());
  }
  backend().linear_backward(x_, w_, dy, need_dx ? &dx_ : nullptr, dw_, has_bias_ ? &db_ : nullptr, fused_, saved,
                            dpre, /*accumulate=*/!take_stale_grads(), queue());
  return need_dx ? dx_ : Tensor{};
}

std::vector<Param> Linear::params() {
  std::vector<Param> p{{"weight", &w_, &dw_}};
  if (has_bias_) p.push_back({"bias", &b_, &db_});
  return p;
}

void Linear::init_params(Rng& rng, const std::string& init) {
  nn::init_weight_bias(w_, has_bias_ ? &b_ : nullptr, in_, out_, rng, init);
}

// y; a fused gelu keeps its pre-activation; backward: dx, and with a fused activation dpre.
ActivationBytes Linear::plan_activations(const kernels::Shape& x, bool training, bool need_dx) {
  ActivationBytes a = Module::plan_activations(x, training, need_dx);
  if (kernels::keeps_input(fused_)) a.forward += nn::f32_bytes(a.output);
  if (training && fused_ != Activation::none) a.backward += nn::f32_bytes(a.output);
  return a;
}

// Recompute (Module::set_recompute): the next forward allocates these again.
void Linear::release_activations() {
  drop(x_);
  drop(y_);
  drop(pre_);
  drop(dpre_);
  drop(dx_);
}

}  // namespace codistill
