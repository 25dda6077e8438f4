#pragma once
// ReLU: y = max(x, 0). Backward needs only the output (dx = dy * [y > 0]), so it keeps its
// own output buffer and no reference to the input.
#include <string>

#include "codistill/nn/layer.hpp"

namespace codistill {

class ReLU : public Layer {
 public:
  std::string kind() const override { return "relu"; }
  kernels::Tensor forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor backward(const kernels::Tensor& dy, bool need_dx = true) override;
  kernels::Shape output_shape(const kernels::Shape& input) const override { return input; }

 private:
  kernels::Tensor y_, dx_;
};

}  // namespace codistill
