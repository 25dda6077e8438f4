#include "codistill/nn/blocks/residual.hpp"

#include <stdexcept>
#include <string>

#include "codistill/nn/activation_plan.hpp"

namespace codistill {

using kernels::Shape;
using kernels::Tensor;

Residual::Residual(std::unique_ptr<Sequential> body, ModulePtr shortcut)
    : body_(std::move(body)), shortcut_(std::move(shortcut)) {
  if (!body_) throw std::invalid_argument("residual: null body");
  body_->set_queue(queue());
  if (shortcut_) shortcut_->set_queue(queue());
}

Shape Residual::output_shape(const Shape& input) const {
  const Shape b = body_->output_shape(input);
  const Shape s = shortcut_ ? shortcut_->output_shape(input) : input;
  if (b != s)
    throw std::invalid_argument("residual: the body gives " + kernels::shape_str(b) + " but the shortcut " +
                                kernels::shape_str(s) + " for input " + kernels::shape_str(input) +
                                (shortcut_ ? "" : " (an identity shortcut needs a body that keeps the shape)"));
  return b;
}

void Residual::set_fused_activation(kernels::Activation act) {
  if (act != kernels::Activation::none && act != kernels::Activation::relu)
    throw std::invalid_argument(std::string("residual: only relu can be fused, got ") + kernels::activation_name(act));
  fused_ = act;
}

void Residual::for_each_child(const ChildFn& fn) {
  fn("body", *body_);
  if (shortcut_) fn("shortcut", *shortcut_);
}

Tensor Residual::do_forward(const Tensor& x, bool training) {
  const Tensor b = body_->forward(x, training);
  const Tensor s = shortcut_ ? shortcut_->forward(x, training) : x;
  kernels::check_shape(s, b.shape(), "residual: shortcut output");
  ensure(y_, b.shape(), b.dtype());
  if (fused_ != kernels::Activation::none) backend().add_activation(b, s, y_, fused_, queue());
  else backend().add(b, s, y_, queue());
  return y_;
}

Tensor Residual::do_backward(const Tensor& dy, bool need_dx) {
  // Both branches see dy (through the fused activation's mask); each returns its input
  // gradient, summed when the caller wants dx.
  const Tensor* g = &dy;
  if (fused_ != kernels::Activation::none) {
    if (!y_.defined()) throw std::logic_error("residual: backward before forward");
    kernels::check_shape(dy, y_.shape(), "residual backward: dy");
    ensure(dpre_, y_.shape(), y_.dtype());
    backend().activation_backward(y_, dy, dpre_, fused_, queue());
    g = &dpre_;
  }
  const Tensor db = body_->backward(*g, need_dx);
  const Tensor ds = shortcut_ ? shortcut_->backward(*g, need_dx) : *g;
  if (!need_dx) return {};
  ensure(dx_, db.shape(), db.dtype());
  backend().add(db, ds, dx_, queue());
  return dx_;
}

// Body and shortcut, y; backward: dpre with a fused activation, and dx.
ActivationBytes Residual::plan_activations(const kernels::Shape& x, bool training, bool need_dx) {
  ActivationBytes a = body_->plan(x, training, need_dx);
  if (shortcut_) {
    a.add(shortcut_->plan(x, training, need_dx));
  }
  a.forward += nn::f32_bytes(a.output);
  if (training && fused_ != kernels::Activation::none) a.backward += nn::f32_bytes(a.output);
  if (training && need_dx) a.backward += nn::f32_bytes(a.output);
  return a;
}

// Recompute (Module::set_recompute): the next forward allocates these again.
void Residual::release_activations() {
  drop(y_);
  drop(dx_);
  drop(dpre_);
  Module::release_activations();
}

}  // namespace codistill
