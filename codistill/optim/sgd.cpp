#include "codistill/optim/sgd.hpp"

#include <cmath>
#include <stdexcept>

namespace codistill {

SGD::SGD(Trainable& model, double momentum, bool nesterov, double weight_decay)
    : Optimizer(model), momentum_(momentum), weight_decay_(weight_decay), nesterov_(nesterov) {
  if (!(momentum >= 0.0 && momentum < 1.0))
    throw std::invalid_argument("sgd: momentum must be in [0, 1), got " + std::to_string(momentum));
  if (!(weight_decay >= 0.0 && std::isfinite(weight_decay)))
    throw std::invalid_argument("sgd: weight_decay must be >= 0, got " + std::to_string(weight_decay));
  if (nesterov && momentum == 0.0) throw std::invalid_argument("sgd: nesterov needs momentum > 0");
}

std::vector<std::string> SGD::slot_names() const {
  if (momentum_ == 0) return {};
  return {"momentum"};
}

void SGD::update(double lr, const OptimizerBlocks* from) {
  if (!std::isfinite(lr)) throw std::invalid_argument("sgd: learning rate is not finite");
  ParamArena& arena = model_->arena();
  if (!arena.grads().defined()) throw std::logic_error("sgd: the model has no gradients (a forward-only copy)");
  kernels::SgdScalars s;
  s.lr = lr;
  s.weight_decay = weight_decay_;
  s.momentum = momentum_;
  s.nesterov = nesterov_;
  s.grad_scale = clip_scale();
  kernels::Tensor* momentum = momentum_ > 0 ? &slot("momentum") : nullptr;
  kernels::UpdateSource src;
  if (from) {
    src.value = &from->values;
    if (momentum) src.m = &from->slots.at("momentum");
  }
  model_->queue().backend().sgd_update(arena.values(), arena.grads(), momentum, s, src, model_->queue());
  ++t_;
}

}  // namespace codistill
