#pragma once
// Fully connected layer: y[B,out] = x[B,in] * weight[out,in]^T + bias[out].
// The bias is fused into the GEMM's output pass (kernels::cpu::linear_forward) and its
// gradient into the weight-gradient pass, so there is no separate bias sweep.
// On CUDA (cuBLAS) a model may also fuse the activation that follows the layer
// (set_fused_activation): bias and activation then run as one pass over the output
// (kernels/cuda/bias_activation.hpp) and the activation layer passes its input through.
#include <cstdint>
#include <string>
#include <vector>

#include "codistill/nn/layer.hpp"
#include "kernels/cuda/bias_activation.hpp"

namespace codistill {

class Linear : public Layer {
 public:
  // Parameters start at zero in float32 until init_params (the model builder calls it).
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true);

  std::string kind() const override { return "linear"; }
  kernels::Tensor forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor backward(const kernels::Tensor& dy, bool need_dx = true) override;
  std::vector<Param> params() override;
  kernels::Shape output_shape(const kernels::Shape& input) const override;
  void init_params(Rng& rng, const std::string& init) override;
  void to_dtype(kernels::DType dtype) override;

  std::int64_t in_features() const { return in_; }
  std::int64_t out_features() const { return out_; }

  // CUDA only (ignored on the CPU): the output is act(x w^T + b); `none` unfuses. Set by
  // Model::to_device together with the activation layer's pass-through.
  void set_fused_activation(kernels::cuda::Activation act) { fused_ = act; }
  kernels::cuda::Activation fused_activation() const { return fused_; }

 private:
  kernels::Tensor forward_cuda(const kernels::Tensor& x);
  kernels::Tensor backward_cuda(const kernels::Tensor& dy, bool need_dx);

  std::int64_t in_, out_;
  bool has_bias_;
  kernels::cuda::Activation fused_ = kernels::cuda::Activation::none;
  kernels::Tensor pre_;   // CUDA, fused gelu: the pre-activation (its backward needs it)
  kernels::Tensor dpre_;  // CUDA, fused: the gradient before the activation
  kernels::Tensor w_, b_, dw_, db_;
  kernels::Tensor x_;   // the input of the last forward (shared, not copied)
  kernels::Tensor y_;   // reused output buffer
  kernels::Tensor dx_;  // reused input-gradient buffer
};

}  // namespace codistill
