#pragma once
// Fully connected layer: y[B,out] = x[B,in] * weight[out,in]^T + bias[out].
// The bias is fused into the GEMM's output pass and its gradient into the weight-gradient
// pass. A container may also fuse the activation that follows the layer
// (set_fused_activation, where the backend supports Op::linear_activation): the output
// is then act(x w^T + b) and the activation layer passes its input through.
#include <cstdint>
#include <string>
#include <vector>

#include "codistill/nn/module.hpp"

namespace codistill {

class Linear : public Layer {
 public:
  // Parameters start at zero in float32 until init_params (the model builder calls it).
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true);

  std::string kind() const override { return "linear"; }
  std::vector<Param> params() override;
  bool can_overwrite_grads() const override { return true; }
  kernels::Shape output_shape(const kernels::Shape& input) const override;
  ActivationBytes plan_activations(const kernels::Shape& x, bool training, bool need_dx) override;
  void release_activations() override;
  void init_params(Rng& rng, const std::string& init) override;

  std::int64_t in_features() const { return in_; }
  std::int64_t out_features() const { return out_; }

  // The output is act(x w^T + b); `none` unfuses. Set by the container (Sequential)
  // together with the activation layer's pass-through.
  void set_fused_activation(kernels::Activation act) { fused_ = act; }
  kernels::Activation fused_activation() const { return fused_; }

  // The parameters and their gradients (arena views once the model is built; the
  // gradients undefined in a forward-only copy), for a fused loss that applies this layer
  // itself (Model::linear_head).
  const kernels::Tensor& weight() const { return w_; }
  kernels::Tensor& weight_grad() { return dw_; }
  bool has_bias() const { return has_bias_; }
  const kernels::Tensor& bias() const { return b_; }
  kernels::Tensor& bias_grad() { return db_; }

 protected:
  kernels::Tensor do_forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor do_backward(const kernels::Tensor& dy, bool need_dx) override;

 private:
  std::int64_t in_, out_;
  bool has_bias_;
  kernels::Activation fused_ = kernels::Activation::none;
  kernels::Tensor w_, b_, dw_, db_;
  kernels::Tensor x_;     // the input of the last forward (shared, not copied)
  kernels::Tensor y_;     // reused output buffer
  kernels::Tensor pre_;   // fused gelu: the pre-activation (its backward needs it)
  kernels::Tensor dpre_;  // fused: the gradient before the activation
  kernels::Tensor dx_;    // reused input-gradient buffer
};

}  // namespace codistill
