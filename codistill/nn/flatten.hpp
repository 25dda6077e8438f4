#pragma once
// [B, d1, d2, ...] -> [B, d1*d2*...]: a view of the same buffer, no copy either way.
#include <string>

#include "codistill/nn/layer.hpp"

namespace codistill {

class Flatten : public Layer {
 public:
  std::string kind() const override { return "flatten"; }
  kernels::Tensor forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor backward(const kernels::Tensor& dy, bool need_dx = true) override;
  kernels::Shape output_shape(const kernels::Shape& input) const override;

 private:
  kernels::Shape x_shape_;
};

}  // namespace codistill
