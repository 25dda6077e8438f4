#include "codistill/nn/layers/activation.hpp"

#include <stdexcept>

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

}  // namespace codistill
