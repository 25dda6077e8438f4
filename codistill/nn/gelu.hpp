#pragma once
// GELU, exact erf form (PyTorch's default): y = x * Phi(x). Backward needs the input, which
// is kept by reference (the caller must not modify it before backward).
#include <string>

#include "codistill/nn/layer.hpp"

namespace codistill {

class GELU : public Layer {
 public:
  std::string kind() const override { return "gelu"; }
  kernels::Tensor forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor backward(const kernels::Tensor& dy, bool need_dx = true) override;
  kernels::Shape output_shape(const kernels::Shape& input) const override { return input; }

  // The preceding Linear applies this activation (CUDA fusion, set by Model::to_device):
  // forward returns its input and backward its output gradient, untouched.
  void set_passthrough(bool on) { passthrough_ = on; }
  bool passthrough() const { return passthrough_; }

 private:
  bool passthrough_ = false;
  kernels::Tensor x_, y_, dx_;
};

}  // namespace codistill
