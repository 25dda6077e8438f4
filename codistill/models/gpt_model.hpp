#pragma once
// Model kind `gpt`: a GPT-2-style decoder-only transformer language model.
//
// Contract (what the trainer feeds and reads):
//   input   int32 token ids [B, T], T = model.seq_len (Model::input_dtype() is int32);
//   output  logits [B*T, V], V = model.vocab_size (or the data's classes), row b*T + t
//           scoring the token that follows token t of sequence b: the labels [B*T] are the
//           window's tokens 1..T in the same b-major, t-minor order. The loss is over the
//           B*T rows (classes = V, input_shape = [T]).
// Modules (root children, per-token shapes in the summary):
//   wte  Embedding(V, D)            token ids -> rows [B*T, D]
//   wpe  PositionEmbedding(T, D)    + learned position rows
//   drop Dropout (when model.dropout > 0)
//   h0 .. h{L-1}  pre-LN transformer blocks (codistill/nn/blocks/transformer_block.hpp), L = model.blocks
//   ln_f LayerNorm(D)
//   head Linear(D, V, no bias)      or, tie_embeddings: true, TiedLinear through wte's weight
// Initialization (GPT-2): every linear and embedding weight ~ N(0, 0.02^2), biases 0,
// LayerNorm 1/0, and the residual projections (attn/proj, mlp/fc2) ~ N(0, (0.02/sqrt(2L))^2).
#include "codistill/models/model_options.hpp"

namespace codistill {

class Model;
class Rng;

void build_gpt(const ModelConfig& cfg, Rng& rng, Model& model);

// cfg with a gpt's derived fields filled (input_shape [seq_len], classes = vocab_size or
// vocab_size = classes), checked against each other; other kinds unchanged. Throws
// std::invalid_argument naming the key.
ModelConfig resolve_gpt(const ModelConfig& cfg);

}  // namespace codistill
