#pragma once
// Causal multi-head self-attention (GPT-2's attn) over token rows [B*T, D], T = seq_len:
//   qkv = x Wqkv^T + b   (child "qkv": Linear(D, 3D), q | k | v per row)
//   a   = causal_attention(qkv)          (kernels/ops.hpp AttentionShape)
//   y   = dropout(a Wo^T + b)            (child "proj": Linear(D, D); child "drop" when p > 0)
// Two kernels compute a, with the same parameters and results (to rounding):
//   materialized  Op::causal_attention; memory kept for the backward: qkv [B*T, 3D],
//                 a [B*T, D] and the probabilities [B, heads, T, T] (plus a scratch block
//                 of that size in backward): it grows with T^2.
//   flash         Op::flash_attention; keeps qkv, a and the log-sum-exp [B, heads, T] and
//                 recomputes the probabilities block by block in backward (model.attention).
// No dropout on the attention probabilities themselves (residual dropout only).
#include <cstdint>
#include <memory>
#include <string>

#include "codistill/nn/layers/dropout.hpp"
#include "codistill/nn/layers/linear.hpp"
#include "codistill/nn/module.hpp"

namespace codistill {

// The kernel of the attention core (the config's model.attention).
enum class AttentionKernel { materialized, flash };
// "materialized" | "flash"; anything else throws std::invalid_argument listing both.
AttentionKernel parse_attention_kernel(const std::string& name);

class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(std::int64_t d_model, std::int64_t heads, std::int64_t seq_len, double dropout = 0.0,
                      AttentionKernel kernel = AttentionKernel::materialized);

  std::string kind() const override { return "causal_self_attention"; }
  kernels::Shape output_shape(const kernels::Shape& input) const override;  // [D] -> [D]
  ActivationBytes plan_activations(const kernels::Shape& x, bool training, bool need_dx) override;
  void release_activations() override;
  void for_each_child(const ChildFn& fn) override;

  Linear& qkv() { return *qkv_; }
  Linear& proj() { return *proj_; }
  AttentionKernel attention_kernel() const { return kernel_; }
  // The probabilities of the last forward, [B, heads, T, T] (materialized only).
  const kernels::Tensor& probs() const { return probs_; }
  // The log-sum-exp of each query row's scores of the last forward, [B, heads, T] (flash only).
  const kernels::Tensor& lse() const { return lse_; }

 protected:
  kernels::Tensor do_forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor do_backward(const kernels::Tensor& dy, bool need_dx) override;

 private:
  kernels::AttentionShape shape_of(std::int64_t rows) const;

  std::int64_t d_model_, heads_, seq_len_;
  AttentionKernel kernel_;
  std::unique_ptr<Linear> qkv_, proj_;
  std::unique_ptr<Dropout> drop_;  // null when p == 0
  kernels::Tensor qkv_out_, att_, probs_, scratch_, lse_, dqkv_;
  std::int64_t rows_ = -1;  // of the last forward
};

}  // namespace codistill
