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
  s.grad_scale = clip_scale();
  kernels::Tensor& m = slot("adam_m");
  kernels::Tensor& v = slot("adam_v");
  for (const DecayRun& r : decay_runs()) {
    s.decay = r.decay ? 1.0 - lr * weight_decay_ : 1.0;
    kernels::Tensor value = part(arena.values(), r), mr = part(m, r), vr = part(v, r);
    kernels::Tensor fv, fm, fvv;  // the run's part of the blocks an out-of-place step reads
    kernels::UpdateSource src;
    if (from) {
      fv = part(from->values, r);
      fm = part(from->slots.at("adam_m"), r);
      fvv = part(from->slots.at("adam_v"), r);
      src = {&fv, &fm, &fvv};
    }
    model_->queue().backend().adamw_update(value, part(arena.grads(), r), mr, vr, s, src, model_->queue());
  }
}

}  // namespace codistill
