#pragma once
// A residual block: y = body(x) + shortcut(x), the shortcut being the identity (no module)
// or a projection (e.g. a strided 1x1 convolution where the body changes the shape).
// Children are named "body" and "shortcut", so parameter paths read
// "block1/body/conv1/weight", "block1/shortcut/conv/weight".
// Fused activation (set_fused_activation, relu only; set by the container where the backend
// supports Op::add_activation, with the ReLU layer after the block passing through): the
// output is relu(body + shortcut) from one pass, and backward applies the relu's mask (its
// output > 0) to dy once, before both branches.
#include <string>

#include "codistill/nn/module.hpp"
#include "codistill/nn/blocks/sequential.hpp"

namespace codistill {

class Residual : public Module {
 public:
  // shortcut may be null: the identity (then body must keep the shape).
  Residual(std::unique_ptr<Sequential> body, ModulePtr shortcut = nullptr);

  std::string kind() const override { return "residual"; }
  kernels::Shape output_shape(const kernels::Shape& input) const override;
  ActivationBytes plan_activations(const kernels::Shape& x, bool training, bool need_dx) override;
  void release_activations() override;
  void for_each_child(const ChildFn& fn) override;

  Sequential& body() { return *body_; }
  // The output is act(body + shortcut) (relu; `none` unfuses). Set by the container
  // (Sequential) together with the activation layer's pass-through.
  void set_fused_activation(kernels::Activation act);
  kernels::Activation fused_activation() const { return fused_; }

 protected:
  kernels::Tensor do_forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor do_backward(const kernels::Tensor& dy, bool need_dx) override;

 private:
  std::unique_ptr<Sequential> body_;
  ModulePtr shortcut_;
  kernels::Activation fused_ = kernels::Activation::none;
  kernels::Tensor y_, dx_;
  kernels::Tensor dpre_;  // fused: dy through the activation's mask, for both branches
};

}  // namespace codistill
