#pragma once
// SGD with PyTorch's torch.optim.SGD semantics (dampening 0):
//   g = grad + weight_decay * p            (L2 decay added to the gradient)
//   buf = momentum * buf + g               (buf starts at zero, so step 1 gives buf = g)
//   g = nesterov ? g + momentum * buf : buf
//   p -= lr * g
// Weights and biases are decayed alike (PyTorch's default with one parameter group).
#include <string>
#include <vector>

#include "codistill/optim/optimizer.hpp"

namespace codistill {

class SGD : public Optimizer {
 public:
  SGD(Trainable& model, double momentum, bool nesterov, double weight_decay);

  std::string kind() const override { return "sgd"; }

 protected:
  void update(double lr, const OptimizerBlocks* from) override;
  // "momentum"; none when momentum is 0 (no state, as PyTorch).
  std::vector<std::string> slot_names() const override;

 private:
  double momentum_, weight_decay_;
  bool nesterov_;
};

}  // namespace codistill
