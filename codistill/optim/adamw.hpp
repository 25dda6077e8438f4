#pragma once
// AdamW with PyTorch's torch.optim.AdamW semantics (amsgrad off). At step t (1-based):
//   p *= 1 - lr * weight_decay                       (decoupled decay, before the update)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)   (eps outside sqrt)
// t is steps_taken() after the increment, so a resumed run restores it with set_steps_taken.
// Weights and biases are decayed alike (PyTorch's default with one parameter group).
#include <string>
#include <vector>

#include "codistill/optim/optimizer.hpp"

namespace codistill {

class AdamW : public Optimizer {
 public:
  AdamW(Trainable& model, double beta1, double beta2, double eps, double weight_decay);

  std::string kind() const override { return "adamw"; }

 protected:
  void update(double lr, const OptimizerBlocks* from) override;
  std::vector<std::string> slot_names() const override { return {"adam_m", "adam_v"}; }

 private:
  double beta1_, beta2_, eps_, weight_decay_;
};

}  // namespace codistill
