#include "codistill/nn/layers/activation.hpp"

#include <stdexcept>
#include "codistill/nn/activation_plan.hpp"

namespace codistill {

using kernels::Activation;
using kernels::Tensor;

std::string ActivationLayer::kind() const { return kernels::activation_name(act_); }

Tensor ActivationLayer::do_forward(const Tensor& x, bool /*training*/) {
  if (passthrough_) return x;  // applied by the Linear before (fusion)
  ensure(y_, x.shape(), x.dtype());
  saved_ = act_ == Activation::relu ? y_ : x;
  backend().activation_forward(x, y_, act_, queue());
  return y_;
}

Tensor ActivationLayer::do_backward(const Tensor& dy, bool need_dx) {
  if (passthrough_) return need_dx ? dy : Tensor{};
  const std::string name = kind();
  if (!saved_.defined()) throw std::logic_error(name + ": backward before forward");
  kernels::check_shape(dy, saved_.shape(), (name + " backward: dy").c_str());
  if (!need_dx) return {};
  ensure(dx_, saved_.shape(), saved_.dtype());
  backend().activation_backward(saved_, dy, dx_, act_, queue());
  return dx_;
}

// Fused into the layer before: nothing of its own. Otherwise y (relu's backward reads it,
// gelu's the input) and dx.
ActivationBytes ActivationLayer::plan_activations(const kernels::Shape& x, bool training, bool need_dx) {
  if (passthrough_) return {0, 0, x};
  return Module::plan_activations(x, training, need_dx);
}

// Recompute (Module::set_recompute): the next forward allocates these again.
void ActivationLayer::release_activations() {
  drop(saved_);
  drop(y_);
  drop(dx_);
}

}  // namespace codistill
