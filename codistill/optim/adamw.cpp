#include "codistill/optim/adamw.hpp"

#include <cmath>
#include <stdexcept>

namespace codistill {

AdamW::AdamW(Trainable& model, double beta1, double beta2, double eps, double weight_decay)
    : Optimizer(model), beta1_(beta1), beta2_(beta2), eps_(eps), weight_decay_(weight_decay) {
  if (!(beta1 >= 0.0 && beta1 < 1.0) || !(beta2 >= 0.0 && beta2 < 1.0))
    throw std::invalid_argument("adamw: beta1 and beta2 must be in [0, 1), got " +
                                std::to_string(beta1) + ", " + std::to_string(beta2));
  if (!(eps > 0.0)) throw std::invalid_argument("adamw: eps must be > 0, got " + std::to_string(eps));
  if (!(weight_decay >= 0.0 && std::isfinite(weight_decay)))
    throw std::invalid_argument("adamw: weight_decay must be >= 0, got " + std::to_string(weight_decay));
}

void AdamW::update(double lr, const OptimizerBlocks* from) {
  if (!std::isfinite(lr)) throw std::invalid_argument("adamw: learning rate is not finite");
  ParamArena& arena = model_->arena();
  if (!arena.grads().defined()) throw std::logic_error("adamw: the model has no gradients (a forward-only copy)");
  ++t_;
  // Scalars in double, as PyTorch computes them in Python floats; the backend casts them
  // to the element type once.
  const double t = static_cast<double>(t_);
  kernels::AdamWScalars s;
  s.beta1 = beta1_;
  s.beta2 = beta2_;
  s.eps = eps_;
  s.step_size = lr / (1.0 - std::pow(beta1_, t));
  s.inv_sqrt_bc2 = 1.0 / std::sqrt(1.0 - std::pow(beta2_, t));
  s.decay = 1.0 - lr * weight_decay_;
  s.grad_scale = clip_scale();
  kernels::UpdateSource src;
  if (from) src = {&from->values, &from->slots.at("adam_m"), &from->slots.at("adam_v")};
  model_->queue().backend().adamw_update(arena.values(), arena.grads(), slot("adam_m"), slot("adam_v"), s, src,
                                         model_->queue());
}

}  // namespace codistill
