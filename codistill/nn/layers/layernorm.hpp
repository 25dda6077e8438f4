#pragma once
// Layer normalization over the last dimension (PyTorch's LayerNorm(features)): each row of
// [..., features] normalized by its own mean and variance, then weight * x + bias. The
// same in training and evaluation; no buffers (kernels/ops.hpp, LayerNormShape).
#include <cstdint>
#include <string>
#include <vector>

#include "codistill/nn/module.hpp"

namespace codistill {

class LayerNorm : public Layer {
 public:
  // weight = 1, bias = 0 (float32).
  explicit LayerNorm(std::int64_t features, double eps = 1e-5);

  std::string kind() const override { return "layernorm"; }
  std::vector<Param> params() override { return {{"weight", &gamma_, &dgamma_}, {"bias", &beta_, &dbeta_}}; }
  // Any shape whose last dimension is `features`: the shape itself.
  kernels::Shape output_shape(const kernels::Shape& input) const override;
  ActivationBytes plan_activations(const kernels::Shape& x, bool training, bool need_dx) override;
  void release_activations() override;
  void init_params(Rng& rng, const std::string& init) override;

 protected:
  kernels::Tensor do_forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor do_backward(const kernels::Tensor& dy, bool need_dx) override;

 private:
  kernels::LayerNormShape shape_of(const kernels::Tensor& x) const;

  std::int64_t features_;
  double eps_;
  kernels::Tensor gamma_, beta_, dgamma_, dbeta_;
  kernels::Tensor x_, y_, dx_, save_mean_, save_invstd_;
};

}  // namespace codistill
