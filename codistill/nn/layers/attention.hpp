#pragma once
// Causal multi-head self-attention (GPT-2's attn) over token rows [B*T, D], T = seq_len:
//   qkv = x Wqkv^T + b   (child "qkv": Linear(D, 3D), q | k | v per row)
//   a   = causal_attention(qkv)          (kernels/ops.hpp AttentionShape; probs saved)
//   y   = dropout(a Wo^T + b)            (child "proj": Linear(D, D); child "drop" when p > 0)
// Memory kept for the backward: qkv [B*T, 3D], a [B*T, D] and the probabilities
// [B, heads, T, T] (plus a scratch block of that size in backward). No dropout on the
// attention probabilities themselves (residual dropout only).
#include <cstdint>
#include <memory>
#include <string>

#include "codistill/nn/layers/dropout.hpp"
#include "codistill/nn/layers/linear.hpp"
#include "codistill/nn/module.hpp"

namespace codistill {

class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(std::int64_t d_model, std::int64_t heads, std::int64_t seq_len, double dropout = 0.0);

  std::string kind() const override { return "causal_self_attention"; }
  kernels::Shape output_shape(const kernels::Shape& input) const override;  // [D] -> [D]
  void for_each_child(const ChildFn& fn) override;

  Linear& qkv() { return *qkv_; }
  Linear& proj() { return *proj_; }
  // The probabilities of the last forward, [B, heads, T, T].
  const kernels::Tensor& probs() const { return probs_; }

 protected:
  kernels::Tensor do_forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor do_backward(const kernels::Tensor& dy, bool need_dx) override;

 private:
  kernels::AttentionShape shape_of(std::int64_t rows) const;

  std::int64_t d_model_, heads_, seq_len_;
  std::unique_ptr<Linear> qkv_, proj_;
  std::unique_ptr<Dropout> drop_;  // null when p == 0
  kernels::Tensor qkv_out_, att_, probs_, scratch_, dqkv_;
  std::int64_t rows_ = -1;  // of the last forward
};

}  // namespace codistill
