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

  // The preceding Linear applies this activation (CUDA fusion, set by Model::to_device):
  // forward returns its input and backward its output gradient, untouched.
  void set_passthrough(bool on) { passthrough_ = on; }
  bool passthrough() const { return passthrough_; }

 private:
  bool passthrough_ = false;
  kernels::Tensor y_, dx_;
};

}  // namespace codistill
