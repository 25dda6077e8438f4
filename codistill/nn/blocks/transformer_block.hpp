#pragma once
// A pre-LayerNorm transformer block (GPT-2) over token rows [B*T, D], built from the
// existing containers:
//   "attn": Residual(body = [ln: LayerNorm(D), attn: CausalSelfAttention])   x + attn(ln(x))
//   "mlp":  Residual(body = [ln: LayerNorm(D), fc1: Linear(D, r*D), gelu: GELU,
//                            fc2: Linear(r*D, D), drop: Dropout (when p > 0)])  x + mlp(ln(x))
// so parameter paths read "h0/attn/body/attn/qkv/weight", "h0/mlp/body/fc2/weight".
#include <cstdint>
#include <memory>

#include "codistill/nn/blocks/sequential.hpp"
#include "codistill/nn/layers/attention.hpp"

namespace codistill {

struct TransformerBlockShape {
  std::int64_t d_model = 64, heads = 4, seq_len = 64, mlp_ratio = 4;
  double dropout = 0.0;
  AttentionKernel attention = AttentionKernel::materialized;  // the attention core's kernel
  bool gelu_tanh = false;  // the MLP's GELU in its tanh form (model.gelu: tanh)
};

std::unique_ptr<Sequential> transformer_block(const TransformerBlockShape& s);

}  // namespace codistill
