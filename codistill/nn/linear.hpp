#pragma once
// Fully connected layer: y[B,out] = x[B,in] * weight[out,in]^T + bias[out].
// The bias is fused into the GEMM's output pass (kernels::cpu::linear_forward) and its
// gradient into the weight-gradient pass, so there is no separate bias sweep.
#include <cstdint>
#include <string>
#include <vector>

#include "codistill/nn/layer.hpp"

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

 private:
  std::int64_t in_, out_;
  bool has_bias_;
  kernels::Tensor w_, b_, dw_, db_;
  kernels::Tensor x_;   // the input of the last forward (shared, not copied)
  kernels::Tensor y_;   // reused output buffer
  kernels::Tensor dx_;  // reused input-gradient buffer
};

}  // namespace codistill
