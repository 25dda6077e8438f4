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
  s.momentum = momentum_;
  s.nesterov = nesterov_;
  s.grad_scale = clip_scale();
  kernels::Tensor* momentum = momentum_ > 0 ? &slot("momentum") : nullptr;
  for (const DecayRun& r : decay_runs()) {
    s.weight_decay = r.decay ? weight_decay_ : 0.0;
    kernels::Tensor value = part(arena.values(), r), buf = momentum ? part(*momentum, r) : kernels::Tensor();
    kernels::Tensor fv, fb;  // the run's part of the blocks an out-of-place step reads
    kernels::UpdateSource src;
    if (from) {
      fv = part(from->values, r);
      src.value = &fv;
      if (momentum) {
        fb = part(from->slots.at("momentum"), r);
        src.m = &fb;
      }
    }
    model_->queue().backend().sgd_update(value, part(arena.grads(), r), momentum ? &buf : nullptr, s, src,
                                         model_->queue());
  }
  ++t_;
}

}  // namespace codistill
