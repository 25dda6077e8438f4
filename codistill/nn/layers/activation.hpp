#pragma once
// Elementwise activation layers: ReLU (y = max(x, 0)) and GELU (exact erf form, PyTorch's
// default: y = x * Phi(x)). One implementation: they differ only in the op's activation
// and in what backward needs — ReLU its own output (dx = dy * [y > 0]), GELU its input, kept
// by reference (the caller must not modify it before backward).
#include <string>

#include "codistill/nn/module.hpp"

namespace codistill {

class ActivationLayer : public Layer {
 public:
  std::string kind() const override;
  kernels::Shape output_shape(const kernels::Shape& input) const override { return input; }
  ActivationBytes plan_activations(const kernels::Shape& x, bool training, bool need_dx) override;
  void release_activations() override;

  kernels::Activation activation() const { return act_; }
  // The preceding Linear applies this activation (fusion, set by the container):
  // forward returns its input and backward its output gradient, untouched.
  void set_passthrough(bool on) { passthrough_ = on; }
  bool passthrough() const { return passthrough_; }

 protected:
  explicit ActivationLayer(kernels::Activation act) : act_(act) {}
  kernels::Tensor do_forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor do_backward(const kernels::Tensor& dy, bool need_dx) override;

 private:
  kernels::Activation act_;
  bool passthrough_ = false;
  kernels::Tensor saved_;  // what backward needs: y (relu) or x (gelu)
  kernels::Tensor y_, dx_;
};

class ReLU : public ActivationLayer {
 public:
  ReLU() : ActivationLayer(kernels::Activation::relu) {}
};

// tanh: GELU's tanh approximation (GPT-2's, PyTorch's approximate='tanh'; kind "gelu_tanh").
class GELU : public ActivationLayer {
 public:
  explicit GELU(bool tanh = false) : ActivationLayer(tanh ? kernels::Activation::gelu_tanh : kernels::Activation::gelu) {}
};

}  // namespace codistill
