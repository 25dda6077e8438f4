// Model kind gpt (codistill/models/gpt_model.hpp): its modules and contract (int32 [B, T] in,
// [B*T, V] logits out), the config checks, the rebuild from the checkpoint `model`
// attribute, whole-model gradients in double, and that a tiny gpt learns a repeating token
// stream on the CPU through the model/optimizer API.
#include <catch2/catch.hpp>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

#include "codistill/config/config_loader.hpp"
#include "codistill/models/gpt_model.hpp"
#include "codistill/models/model.hpp"
#include "codistill/nn/layers/attention.hpp"
#include "codistill/optim/optimizer.hpp"
#include "codistill/util/rng.hpp"
#include "support/test_util.hpp"
#include "support/training_setup.hpp"

using namespace codistill;
using kernels::DType;
using kernels::Shape;
using kernels::Tensor;
using test::tiny_gpt;

namespace {

ModelConfig tied_config() {
  ModelConfig c = tiny_gpt();
  c.tie_embeddings = true;
  return c;
}

Tensor tokens(const std::vector<std::int32_t>& v, std::int64_t B, std::int64_t T) {
  Tensor t = Tensor::empty({B, T}, DType::i32);
  std::memcpy(t.raw(), v.data(), v.size() * sizeof(std::int32_t));
  return t;
}

}  // namespace

TEST_CASE("gpt: modules, parameter paths, int32 input and [B*T, V] logits", "[models][gpt]") {
  Rng rng(7);
  Model m = build_model(tiny_gpt(), rng);
  CHECK(m.input_dtype() == DType::i32);
  CHECK(m.input_shape() == Shape{16});
  std::vector<std::string> paths;
  for (auto& p : m.params()) paths.push_back(p.path);
  CHECK(paths.front() == "wte/weight");
  CHECK(paths[1] == "wpe/weight");
  CHECK(std::find(paths.begin(), paths.end(), "h1/attn/body/attn/qkv/weight") != paths.end());
  CHECK(std::find(paths.begin(), paths.end(), "h0/mlp/body/fc2/bias") != paths.end());
  CHECK(paths.back() == "head/weight");
  const std::string summary = m.summary();
  CHECK_THAT(summary, Catch::Contains("causal_self_attention"));
  CHECK_THAT(summary, Catch::Contains("ln_f"));
  // 64*32 + 16*32 + 2 * (2*32 [ln] + 32*96+96 + 32*32+32 + 2*32 [ln] + 32*128+128 + 128*32+32) + 2*32 + 32*64
  CHECK(m.num_params() == 64 * 32 + 16 * 32 + 2 * (64 + 3168 + 1056 + 64 + 4224 + 4128) + 64 + 2048);
  // GPT-2 init: residual projections have the smaller spread.
  auto stddev = [&](const std::string& path) {
    for (auto& p : m.params())
      if (p.path == path) {
        double ss = 0;
        for (std::int64_t i = 0; i < p.value->numel(); ++i) ss += std::pow(p.value->data<float>()[i], 2);
        return std::sqrt(ss / static_cast<double>(p.value->numel()));
      }
    return -1.0;
  };
  CHECK(stddev("h0/attn/body/attn/qkv/weight") == Approx(0.02).epsilon(0.1));
  CHECK(stddev("h0/mlp/body/fc2/weight") == Approx(0.01).epsilon(0.1));  // 0.02 / sqrt(2*2)

  std::vector<std::int32_t> ids(3 * 16);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7) % 64);
  const Tensor logits = m.forward(tokens(ids, 3, 16), false);
  CHECK(logits.shape() == Shape{48, 64});
  // Causality: changing the last token of sequence 1 changes only its own row's logits.
  const Tensor before = logits.clone();
  ids[16 + 15] = 3;
  const Tensor after = m.forward(tokens(ids, 3, 16), false);
  for (std::int64_t r = 0; r < 48; ++r) {
    bool same = true;
    for (std::int64_t j = 0; j < 64; ++j) same = same && before.data<float>()[r * 64 + j] == after.data<float>()[r * 64 + j];
    CHECK(same == (r != 31));
  }
  // A float input, a wrong T and an out-of-range id are refused.
  CHECK_THROWS_AS(m.forward(Tensor::zeros({3, 16}), false), std::invalid_argument);
  CHECK_THROWS_AS(m.forward(Tensor::zeros({3, 8}, DType::i32), false), std::invalid_argument);
  ids[5] = 64;
  CHECK_THROWS_WITH(m.forward(tokens(ids, 3, 16), false), Catch::Contains("row 5 has id 64"));
}

TEST_CASE("gpt: config checks name the key", "[models][gpt]") {
  Rng rng(1);
  ModelConfig c = tiny_gpt();
  c.heads = 3;
  CHECK_THROWS_WITH(build_model(c, rng), Catch::Contains("model.heads"));
  c = tiny_gpt();
  c.vocab_size = 0;
  CHECK_THROWS_WITH(build_model(c, rng), Catch::Contains("vocab_size"));
  c.classes = 50;  // from the data
  CHECK(build_model(c, rng).params().back().value->dim(0) == 50);
  c = tiny_gpt();
  c.classes = 50;
  CHECK_THROWS_WITH(build_model(c, rng), Catch::Contains("differs"));
  c = tiny_gpt();
  c.attention = "fused";
  CHECK_THROWS_WITH(build_model(c, rng), Catch::Contains("model.attention"));
}

TEST_CASE("gpt: the model attribute rebuilds the same model", "[models][gpt]") {
  Rng rng(3);
  ModelConfig c = tiny_gpt(1, 16, 4, 8, 20);
  c.dropout = 0.1;
  Model a = build_model(c, rng);
  const std::string yaml = model_yaml(resolve_gpt(c));
  CHECK_THAT(yaml, Catch::Contains("d_model: 16"));
  const ModelConfig back = model_from_yaml(yaml);
  CHECK(back.kind == "gpt");
  CHECK(back.heads == 4);
  Rng other(99);
  Model b = build_model(back, other);
  CHECK(a.fingerprint() == b.fingerprint());
  b.arena().values().copy_from(a.arena().values());
  std::vector<std::int32_t> ids(2 * 8);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 3) % 20);
  const Tensor ya = a.forward(tokens(ids, 2, 8), false).clone(), yb = b.forward(tokens(ids, 2, 8), false);
  CHECK(std::memcmp(ya.raw(), yb.raw(), ya.nbytes()) == 0);
  // Other kinds' attributes do not grow the gpt keys.
  ModelConfig mlp;
  mlp.input_shape = {4};
  mlp.classes = 3;
  CHECK_THAT(model_yaml(mlp), !Catch::Contains("d_model"));
}

TEST_CASE("gpt: model.gelu tanh puts GELU's tanh form in every MLP, and the attribute says so", "[models][gpt]") {
  Rng rng(3);
  ModelConfig c = tiny_gpt(2, 16, 4, 8, 20);
  const std::string erf_yaml = model_yaml(resolve_gpt(c));
  CHECK_THAT(erf_yaml, !Catch::Contains("gelu"));  // the default leaves earlier attributes as they were
  c.gelu = "tanh";
  Model m = build_model(c, rng);
  int tanh_layers = 0;
  visit_modules(m.root(), [&](const std::string&, Module& child) {
    CHECK(child.kind() != "gelu");
    tanh_layers += child.kind() == "gelu_tanh";
  });
  CHECK(tanh_layers == 2);  // one per block
  const ModelConfig back = model_from_yaml(model_yaml(resolve_gpt(c)));
  CHECK(back.gelu == "tanh");
  c.gelu = "fast";
  CHECK_THROWS_WITH(build_model(c, rng), Catch::Contains("valid: erf, tanh"));
}

TEST_CASE("gpt: whole-model gradients match finite differences (double), tied head or not",
          "[models][gpt][gradcheck]") {
  const bool tied = GENERATE(false, true);
  const std::string attention = GENERATE(as<std::string>{}, "materialized", "flash");
  const std::string gelu = GENERATE(as<std::string>{}, "erf", "tanh");
  INFO((tied ? "tied head" : "untied head") << ", attention " << attention << ", gelu " << gelu);
  Rng rng(11);
  ModelConfig cfg = tiny_gpt(1, 4, 2, 3, 5);
  cfg.tie_embeddings = tied;
  cfg.attention = attention;
  cfg.gelu = gelu;
  Model m = build_model(cfg, rng);
  m.to_dtype(DType::f64);
  const std::vector<std::int32_t> ids{1, 4, 0, 2, 2, 3};
  const std::vector<std::int32_t> labels{4, 0, 2, 2, 3, 1};
  const Tensor x = tokens(ids, 2, 3);
  auto loss = [&](Tensor* grad) {
    const Tensor z = m.forward(x, true);
    double total = 0;
    for (std::int64_t r = 0; r < 6; ++r) {
      const double* row = z.data<double>() + r * 5;
      double mx = row[0], sum = 0;
      for (int j = 1; j < 5; ++j) mx = std::max(mx, row[j]);
      for (int j = 0; j < 5; ++j) sum += std::exp(row[j] - mx);
      total += std::log(sum) + mx - row[labels[static_cast<std::size_t>(r)]];
      if (grad)
        for (int j = 0; j < 5; ++j)
          grad->data<double>()[r * 5 + j] = (std::exp(row[j] - mx) / sum - (j == labels[static_cast<std::size_t>(r)])) / 6;
    }
    return total / 6;
  };
  for (bool reference : {true, false}) {
    INFO((reference ? "reference" : "fast"));
    m.set_reference(reference);
    m.zero_grad();
    Tensor dz = Tensor::empty({6, 5}, DType::f64);
    loss(&dz);
    m.backward(dz);
    for (auto& p : m.params()) {
      INFO("param " << p.path);
      std::vector<double*> ptrs;
      for (std::int64_t i = 0; i < p.value->numel(); ++i) ptrs.push_back(p.value->data<double>() + i);
      const auto numeric = test::numeric_gradient([&] { return loss(nullptr); }, ptrs);
      std::vector<double> analytic(p.grad->data<double>(), p.grad->data<double>() + p.grad->numel());
      CHECK(test::max_rel_error(analytic, numeric) < 1e-5);
    }
  }
}

TEST_CASE("gpt: flash attention gives the materialized model's logits and gradients, without the probabilities",
          "[models][gpt]") {
  // T = 150: two blocks of the CPU's flash kernel (kFlashBlock), the second one short.
  ModelConfig cfg = tiny_gpt(2, 32, 2, 150, 64);
  Rng ra(5), rb(5);
  Model a = build_model(cfg, ra);
  cfg.attention = "flash";
  Model b = build_model(cfg, rb);
  CHECK(a.fingerprint() == b.fingerprint());  // not part of the architecture
  std::vector<std::int32_t> ids(2 * 150);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 13 + i / 7) % 64);
  std::vector<std::vector<float>> logits, grads;
  for (Model* m : {&a, &b}) {
    m->zero_grad();
    const Tensor z = m->forward(tokens(ids, 2, 150), true);
    logits.emplace_back(z.data<float>(), z.data<float>() + z.numel());
    Tensor dz = Tensor::empty(z.shape(), DType::f32);
    for (std::int64_t i = 0; i < dz.numel(); ++i) dz.data<float>()[i] = static_cast<float>(std::sin(0.37 * i)) / 200;
    m->backward(dz);
    grads.emplace_back(m->arena().grads().data<float>(), m->arena().grads().data<float>() + m->arena().grads().numel());
  }
  CHECK(test::rel_error(logits[1], logits[0]) < 1e-4);
  CHECK(test::rel_error(grads[1], grads[0]) < 1e-4);
  // What the flash layers keep for the backward: the log-sum-exp, no [B, H, T, T] tensor.
  int flash_layers = 0;
  visit_modules(b.root(), [&](const std::string&, Module& m) {
    if (auto* attn = dynamic_cast<CausalSelfAttention*>(&m)) {
      CHECK(attn->attention_kernel() == AttentionKernel::flash);
      CHECK_FALSE(attn->probs().defined());
      CHECK(attn->lse().shape() == Shape{2, 2, 150});
      ++flash_layers;
    }
  });
  CHECK(flash_layers == 2);
}

TEST_CASE("gpt: a tiny model learns a repeating token stream on the CPU", "[models][gpt][train]") {
  const std::int64_t B = 8, T = 16, V = 64;
  Rng rng(5);
  Model m = build_model(tiny_gpt(2, 32, 2, T, V), rng);
  OptimizerConfig oc;
  oc.kind = "adamw";
  oc.lr = 3e-3;
  auto opt = make_optimizer(oc, m);
  // Each token determines the next one.
  test::PeriodStream stream(V);
  kernels::Backend& be = m.queue().backend();
  Tensor labels = Tensor::empty({B * T}, DType::i32), dz = Tensor::empty({B * T, V});
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(B * T));
    stream.next(ids.data(), labels.data<std::int32_t>(), B, T);
    m.zero_grad();
    const Tensor z = m.forward(tokens(ids, B, T), true);
    const auto r = be.distill_loss(z, {}, labels, &dz, {}, m.queue());
    m.backward(dz);
    opt->step(oc.lr);
    if (step == 0) first = r.ce;
    last = r.ce;
  }
  INFO("first loss " << first << ", last " << last << ", log(V) " << std::log(64.0));
  CHECK(first > 0.8 * std::log(64.0));
  CHECK(last < 0.1 * std::log(64.0));
}

TEST_CASE("gpt: a tied head reads and trains the token embedding's weight", "[models][gpt]") {
  Rng rng(5), rng2(5);
  ModelConfig c = tiny_gpt();
  c.tie_embeddings = true;
  Model tied = build_model(c, rng);
  c.tie_embeddings = false;
  Model untied = build_model(c, rng2);
  // One vocabulary matrix fewer, and no head/weight anywhere (arena, checkpoints).
  CHECK(tied.num_params() == untied.num_params() - 64 * 32);
  for (auto& p : tied.params()) CHECK(p.path != "head/weight");
  CHECK(tied.fingerprint() != untied.fingerprint());
  CHECK_THAT(model_yaml(resolve_gpt(tied_config())), Catch::Contains("tie_embeddings: true"));

  // The logits are the final hidden states times wte/weight^T: doubling the embedding
  // matrix's rows that no input uses changes those vocabulary entries' logits only.
  std::vector<std::int32_t> ids(2 * 16);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>(i % 8);  // ids 0..7
  const Tensor before = tied.forward(tokens(ids, 2, 16), false).clone();
  Tensor* wte = nullptr;
  for (auto& p : tied.params())
    if (p.path == "wte/weight") wte = p.value;
  REQUIRE(wte != nullptr);
  for (std::int64_t v = 8; v < 64; ++v)
    for (std::int64_t j = 0; j < 32; ++j) wte->data<float>()[v * 32 + j] *= 2.0f;
  const Tensor after = tied.forward(tokens(ids, 2, 16), false);
  for (std::int64_t r = 0; r < 32; ++r)
    for (std::int64_t v = 0; v < 64; ++v) {
      const float b = before.data<float>()[r * 64 + v], a = after.data<float>()[r * 64 + v];
      if (v < 8) CHECK(a == b);
      else CHECK(a == Approx(2.0f * b).margin(1e-6));
    }
}

TEST_CASE("gpt: the head fused into the loss gives the unfused loss and gradients, tied or not",
          "[models][gpt][fused_head]") {
  const bool tied = GENERATE(false, true);
  INFO((tied ? "tied head" : "untied head"));
  ModelConfig c = tiny_gpt(1, 16, 2, 8, 40);
  c.tie_embeddings = tied;
  Rng rng(21), trng(22);
  Model m = build_model(c, rng);
  ModelConfig tc = tiny_gpt(1, 24, 2, 8, 40);  // a teacher of another width
  Model teacher = build_model(tc, trng);
  teacher.drop_grads();
  REQUIRE(m.linear_head());
  REQUIRE(teacher.linear_head());
  CHECK(teacher.linear_head()->weight_grad == nullptr);
  CHECK((m.linear_head()->bias == nullptr));

  std::vector<std::int32_t> ids(3 * 8), labels(3 * 8);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<std::int32_t>((i * 11 + 3) % 40);
    labels[i] = i % 5 == 0 ? -1 : static_cast<std::int32_t>((i * 7) % 40);
  }
  const Tensor x = tokens(ids, 3, 8);
  Tensor y = Tensor::empty({24}, DType::i32);
  std::memcpy(y.raw(), labels.data(), labels.size() * sizeof(std::int32_t));
  kernels::Queue& q = m.queue();
  kernels::DistillLossParams p;
  p.temperature = 2.0, p.weight = 0.6, p.hard_weight = 0.4;

  // Unfused: logits, the loss with the teacher's logits, backward.
  m.zero_grad();
  const Tensor t_logits = teacher.forward(x, false).clone();
  const Tensor z = m.forward(x, true);
  Tensor dz = Tensor::empty(z.shape(), DType::f32);
  const auto plain = q.backend().distill_loss(z, {&t_logits}, y, &dz, p, q);
  m.backward(dz);
  const Tensor g_plain = m.arena().grads().clone();

  // Fused: features, the head inside the loss, backward from the features.
  m.zero_grad();
  const Tensor t_feat = teacher.forward_features(x, false).clone();
  const auto th = *teacher.linear_head();
  const Tensor f = m.forward_features(x, true);
  CHECK(f.shape() == Shape{24, 16});
  const auto h = *m.linear_head();
  Tensor df = Tensor::empty(f.shape(), DType::f32);
  kernels::DistillHeadParams hp;
  hp.loss = p;
  hp.workspace_bytes = 3 * 40 * 2 * sizeof(float);  // chunks of 3 rows: several per batch
  const auto fused = q.backend().linear_distill_head(f, *h.weight, h.bias, {{&t_feat, th.weight, th.bias}}, y, &df,
                                                    h.weight_grad, h.bias_grad, hp, q);
  m.backward_features(df);
  const Tensor g_fused = m.arena().grads();

  CHECK(fused.rows == plain.rows);
  CHECK(fused.loss == Approx(plain.loss).epsilon(1e-5));
  CHECK(fused.distill == Approx(plain.distill).epsilon(1e-5));
  double diff = 0, scale = 0;
  for (std::int64_t i = 0; i < g_plain.numel(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(g_plain.data<float>()[i] - g_fused.data<float>()[i])));
    scale = std::max(scale, static_cast<double>(std::abs(g_plain.data<float>()[i])));
  }
  CHECK(scale > 0);
  CHECK(diff <= 1e-5 * scale);
}

// configs/gpt2_124m.yaml is GPT-2 small: 124,475,904 parameters with the vocabulary padded to
// 50304 and the head tied (nanoGPT's count for the same model), GELU's tanh form in each
// block, and the recipe's optimizer keys.
TEST_CASE("gpt: the shipped GPT-2 124M config builds GPT-2 small", "[models][gpt]") {
  const Config c = load_config(std::string(CODISTILL_SOURCE_DIR) + "/configs/gpt2_124m.yaml");
  CHECK(c.optimizer.decay == "matrices");
  CHECK(c.optimizer.clip_grad_norm == 1.0);
  CHECK(c.optimizer.beta2 == 0.95);
  ModelConfig mc = c.model;
  mc.input_shape = {mc.seq_len};
  mc.classes = mc.vocab_size;
  Rng rng(1);
  Model m = build_model(mc, rng);
  CHECK(m.num_params() == 124475904);
  int tanh_layers = 0;
  visit_modules(m.root(), [&](const std::string&, Module& child) { tanh_layers += child.kind() == "gelu_tanh"; });
  CHECK(tanh_layers == 12);
}
