#pragma once
// Elementwise activation layers: ReLU (y = max(x, 0)) and GELU (exact erf form, PyTorch's
// default: y = x * Phi(x)). One implementation: they differ only in the kernels called and
// in what backward needs — ReLU its own output (dx = dy * [y > 0]), GELU its input, kept
// by reference (the caller must not modify it before backward).
#include <string>

#include "codistill/nn/layer.hpp"
#include "kernels/cuda/bias_activation.hpp"

namespace codistill {

class ActivationLayer : public Layer {
 public:
  std::string kind() const override;
  kernels::Tensor forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor backward(const kernels::Tensor& dy, bool need_dx = true) override;
  kernels::Shape output_shape(const kernels::Shape& input) const override { return input; }

  kernels::cuda::Activation activation() const { return act_; }
  // The preceding Linear applies this activation (CUDA fusion, set by Model::to_device):
  // forward returns its input and backward its output gradient, untouched.
  void set_passthrough(bool on) { passthrough_ = on; }
  bool passthrough() const { return passthrough_; }

 protected:
  explicit ActivationLayer(kernels::cuda::Activation act) : act_(act) {}

 private:
  kernels::cuda::Activation act_;
  bool passthrough_ = false;
  kernels::Tensor saved_;  // what backward needs: y (relu) or x (gelu)
  kernels::Tensor y_, dx_;
};

class ReLU : public ActivationLayer {
 public:
  ReLU() : ActivationLayer(kernels::cuda::Activation::relu) {}
};

class GELU : public ActivationLayer {
 public:
  GELU() : ActivationLayer(kernels::cuda::Activation::gelu) {}
};

}  // namespace codistill
