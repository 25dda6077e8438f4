#include "codistill/nn/layers/layernorm.hpp"

#include <stdexcept>
#include "codistill/nn/activation_plan.hpp"

namespace codistill {

using kernels::Shape;
using kernels::Tensor;

LayerNorm::LayerNorm(std::int64_t features, double eps) : features_(features), eps_(eps) {
  kernels::LayerNormShape{0, features, eps}.validate();
  gamma_ = Tensor::full({features}, 1.0);
  beta_ = Tensor::zeros({features});
  dgamma_ = Tensor::zeros({features});
  dbeta_ = Tensor::zeros({features});
}

Shape LayerNorm::output_shape(const Shape& input) const {
  if (input.empty() || input.back() != features_)
    throw std::invalid_argument("layernorm: expected input [..., " + std::to_string(features_) + "], got " +
                                kernels::shape_str(input));
  return input;
}

void LayerNorm::init_params(Rng& /*rng*/, const std::string& /*init*/) {
  gamma_.fill(1.0);
  beta_.fill(0.0);
}

kernels::LayerNormShape LayerNorm::shape_of(const Tensor& x) const {
  if (x.ndim() < 2 || x.dim(-1) != features_)
    throw std::invalid_argument("layernorm: expected input [B, ..., " + std::to_string(features_) + "], got " +
                                kernels::shape_str(x.shape()));
  return {x.numel() / features_, features_, eps_};
}

Tensor LayerNorm::do_forward(const Tensor& x, bool /*training*/) {
  const auto s = shape_of(x);
  x_ = x;
  ensure(y_, x.shape(), x.dtype());
  ensure(save_mean_, {s.rows}, x.dtype());
  ensure(save_invstd_, {s.rows}, x.dtype());
  backend().layernorm_forward(x, gamma_, beta_, y_, save_mean_, save_invstd_, s, queue());
  return y_;
}

Tensor LayerNorm::do_backward(const Tensor& dy, bool need_dx) {
  if (!x_.defined()) throw std::logic_error("layernorm: backward before forward");
  if (!dgamma_.defined()) throw std::logic_error("layernorm: backward on a forward-only copy (no grads)");
  kernels::check_shape(dy, x_.shape(), "layernorm backward: dy");
  if (need_dx) ensure(dx_, x_.shape(), x_.dtype());
  backend().layernorm_backward(x_, gamma_, save_mean_, save_invstd_, dy, need_dx ? &dx_ : nullptr, dgamma_, dbeta_,
                               shape_of(x_), queue());
  return need_dx ? dx_ : Tensor{};
}

// y, the saved mean and inverse deviation per row, dx.
ActivationBytes LayerNorm::plan_activations(const kernels::Shape& x, bool training, bool need_dx) {
  ActivationBytes a = Module::plan_activations(x, training, need_dx);
  a.forward += nn::f32_bytes(2 * (kernels::shape_numel(x) / features_));
  return a;
}

// Recompute (Module::set_recompute): the next forward allocates these again.
void LayerNorm::release_activations() {
  drop(x_);
  drop(y_);
  drop(dx_);
  drop(save_mean_);
  drop(save_invstd_);
}

}  // namespace codistill
