#include "codistill/nn/blocks/transformer_block.hpp"

#include <stdexcept>
#include <string>

#include "codistill/nn/layers/activation.hpp"
#include "codistill/nn/layers/attention.hpp"
#include "codistill/nn/layers/dropout.hpp"
#include "codistill/nn/layers/layernorm.hpp"
#include "codistill/nn/layers/linear.hpp"
#include "codistill/nn/blocks/residual.hpp"

namespace codistill {

std::unique_ptr<Sequential> transformer_block(const TransformerBlockShape& s) {
  if (s.mlp_ratio < 1)
    throw std::invalid_argument("transformer block: mlp_ratio must be >= 1, got " + std::to_string(s.mlp_ratio));
  auto attn = std::make_unique<Sequential>();
  attn->add("ln", std::make_unique<LayerNorm>(s.d_model));
  attn->add("attn", std::make_unique<CausalSelfAttention>(s.d_model, s.heads, s.seq_len, s.dropout, s.attention));
  auto mlp = std::make_unique<Sequential>();
  mlp->add("ln", std::make_unique<LayerNorm>(s.d_model));
  mlp->add("fc1", std::make_unique<Linear>(s.d_model, s.mlp_ratio * s.d_model));
  mlp->add("gelu", std::make_unique<GELU>(s.gelu_tanh));
  mlp->add("fc2", std::make_unique<Linear>(s.mlp_ratio * s.d_model, s.d_model));
  if (s.dropout > 0) mlp->add("drop", std::make_unique<Dropout>(s.dropout));
  auto block = std::make_unique<Sequential>();
  block->add("attn", std::make_unique<Residual>(std::move(attn)));
  block->add("mlp", std::make_unique<Residual>(std::move(mlp)));
  return block;
}

}  // namespace codistill
