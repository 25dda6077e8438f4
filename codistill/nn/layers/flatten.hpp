#pragma once
// [B, d1, d2, ...] -> [B, d1*d2*...]: a view of the same buffer, no copy either way.
#include <string>

#include "codistill/nn/module.hpp"

namespace codistill {

class Flatten : public Layer {
 public:
  std::string kind() const override { return "flatten"; }
  kernels::Shape output_shape(const kernels::Shape& input) const override;
  ActivationBytes plan_activations(const kernels::Shape& x, bool training, bool need_dx) override;

 protected:
  kernels::Tensor do_forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor do_backward(const kernels::Tensor& dy, bool need_dx) override;

 private:
  kernels::Shape x_shape_;
};

}  // namespace codistill
