#include "codistill/models/gpt_model.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "codistill/models/model.hpp"
#include "codistill/nn/layers/attention.hpp"
#include "codistill/nn/layers/dropout.hpp"
#include "codistill/nn/layers/embedding.hpp"
#include "codistill/nn/init.hpp"
#include "codistill/nn/layers/layernorm.hpp"
#include "codistill/nn/layers/linear.hpp"
#include "codistill/nn/layers/position_embedding.hpp"
#include "codistill/nn/layers/tied_linear.hpp"
#include "codistill/nn/blocks/transformer_block.hpp"

namespace codistill {

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("model 'gpt': " + what); }

// GPT-2's init of a Linear: weight ~ N(0, std^2), bias 0.
void init_linear(Linear& l, double std, Rng& rng) {
  for (auto& p : l.params()) {
    if (p.name == "weight") nn::init_normal(*p.value, std, rng);
    else p.value->fill(0.0);
  }
}

}  // namespace

ModelConfig resolve_gpt(const ModelConfig& cfg) {
  if (cfg.kind != "gpt") return cfg;
  ModelConfig c = cfg;
  if (c.vocab_size == 0) c.vocab_size = c.classes;
  if (c.classes == 0) c.classes = c.vocab_size;
  if (c.vocab_size < 1) fail("model.vocab_size is 0 and the data gives no vocabulary (classes)");
  if (c.classes != c.vocab_size)
    fail("model.vocab_size " + std::to_string(c.vocab_size) + " differs from the data's " +
         std::to_string(c.classes) + " classes");
  if (c.input_shape.empty()) c.input_shape = {c.seq_len};
  if (c.input_shape != std::vector<std::int64_t>{c.seq_len})
    fail("input_shape " + kernels::shape_str(c.input_shape) + " is not [model.seq_len] = [" +
         std::to_string(c.seq_len) + "]");
  if (c.seq_len < 1) fail("model.seq_len must be >= 1, got " + std::to_string(c.seq_len));
  if (c.d_model < 1 || c.heads < 1 || c.d_model % c.heads != 0)
    fail("model.heads (" + std::to_string(c.heads) + ") must divide model.d_model (" + std::to_string(c.d_model) +
         ")");
  if (c.blocks < 1) fail("model.blocks must be >= 1, got " + std::to_string(c.blocks));
  if (c.mlp_ratio < 1) fail("model.mlp_ratio must be >= 1, got " + std::to_string(c.mlp_ratio));
  if (c.attention != "materialized" && c.attention != "flash")
    fail("model.attention must be materialized or flash, got '" + c.attention + "'");
  return c;
}

void build_gpt(const ModelConfig& raw, Rng& rng, Model& model) {
  const ModelConfig cfg = resolve_gpt(raw);
  const std::int64_t V = cfg.vocab_size, T = cfg.seq_len, D = cfg.d_model, L = cfg.blocks;
  model.set_input_dtype(kernels::DType::i32);

  auto wte = std::make_unique<Embedding>(V, D, T);
  Embedding& token_embedding = *wte;  // owned by the model below; a tied head reads its weight
  auto wpe = std::make_unique<PositionEmbedding>(T, D);
  wte->init_params(rng, cfg.init);
  wpe->init_params(rng, cfg.init);
  model.add("wte", std::move(wte));
  model.add("wpe", std::move(wpe));
  if (cfg.dropout > 0) {
    auto drop = std::make_unique<Dropout>(cfg.dropout);
    drop->init_params(rng, cfg.init);
    model.add("drop", std::move(drop));
  }
  const double resid_std = 0.02 / std::sqrt(2.0 * static_cast<double>(L));
  const AttentionKernel kernel = parse_attention_kernel(cfg.attention);
  for (std::int64_t l = 0; l < L; ++l) {
    auto block = transformer_block({D, cfg.heads, T, cfg.mlp_ratio, cfg.dropout, kernel, cfg.gelu == "tanh"});
    // Tree order: dropout streams seeded, LayerNorms reset, linears drawn in order.
    visit_modules(*block, [&](const std::string& path, Module& m) {
      if (auto* lin = dynamic_cast<Linear*>(&m)) {
        const bool residual = path == "attn/body/attn/proj" || path == "mlp/body/fc2";
        init_linear(*lin, residual ? resid_std : 0.02, rng);
      } else if (m.kind() == "dropout" || m.kind() == "layernorm") {
        m.init_params(rng, cfg.init);
      }
    });
    block->mark_block();  // the unit train.recompute: blocks recomputes
    std::string name = "h";  // appended, not "h" + to_string: GCC 12's -Wrestrict false positive
    name += std::to_string(l);
    model.add(name, std::move(block));
  }
  model.add("ln_f", std::make_unique<LayerNorm>(D));
  if (cfg.tie_embeddings) {
    // The head is the token embedding's matrix (no head/weight in the arena or checkpoints).
    model.add("head", std::make_unique<TiedLinear>(token_embedding));
  } else {
    auto head = std::make_unique<Linear>(D, V, /*bias=*/false);
    init_linear(*head, 0.02, rng);
    model.add("head", std::move(head));
  }
}

}  // namespace codistill
