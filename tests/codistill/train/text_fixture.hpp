#pragma once
// Shared by the language-model engine tests: a prepared folder of token files and a tiny
// language model. The gpt model kind is not on this branch: the model here is a bigram
// table built from existing parts — a parameterless one-hot module (int32 [B, T] ->
// float32 [B*T, V], CPU only, defined below) followed by a Linear(V, V) — so its logits
// are [B*T, V] in b-major, t-minor order as the gpt contract says.
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "codistill/data/text/tokenizer/tokenizer.hpp"
#include "codistill/data/text/tokens/token_file.hpp"
#include "codistill/models/model.hpp"
#include "codistill/nn/layers/linear.hpp"
#include "codistill/util/rng.hpp"
#include "support/process.hpp"

namespace codistill::test_text {

namespace text = codistill::data::text;
using kernels::Tensor;

constexpr std::int64_t kVocab = 257;  // the byte tokenizer without merges: 256 bytes + end of document

// int32 token ids [B, T] -> float32 one-hot rows [B*T, V]; no parameters, so the input
// dtype check of Module::forward lets int32 through. Test-only (host loops).
class OneHot final : public Layer {
 public:
  explicit OneHot(std::int64_t vocab) : vocab_(vocab) {}
  std::string kind() const override { return "one_hot"; }
  kernels::Shape output_shape(const kernels::Shape&) const override { return {vocab_}; }

 protected:
  Tensor do_forward(const Tensor& x, bool) override {
    const std::int64_t n = x.numel();
    Tensor& out = ensure(out_, {n, vocab_}, kernels::DType::f32);
    float* o = out.data<float>();
    std::memset(o, 0, static_cast<std::size_t>(n * vocab_) * sizeof(float));
    const auto* t = x.data<std::int32_t>();
    for (std::int64_t i = 0; i < n; ++i) o[i * vocab_ + t[i]] = 1.0f;
    return out;
  }
  Tensor do_backward(const Tensor&, bool) override { return {}; }

 private:
  std::int64_t vocab_;
  Tensor out_;
};

inline Model bigram(Rng& rng) {
  Model m;
  m.add("one_hot", std::make_unique<OneHot>(kVocab));
  auto fc = std::make_unique<Linear>(kVocab, kVocab);
  fc->init_params(rng, "xavier_uniform");
  m.add("table", std::move(fc));
  m.finalize();
  return m;
}

inline Model bigram(std::uint64_t seed) {
  Rng rng(seed);
  return bigram(rng);
}

// A prepared folder: the byte tokenizer, training documents drawn from a noisy cycle over
// 40 tokens (so that the next token depends on the current one), and held-out documents.
struct Folder {
  codistill::test::TempDir dir;
  std::string path;
  Folder() {
    path = dir.str("prepared");
    std::filesystem::create_directories(path);
    const text::Tokenizer tok;
    tok.save(path + "/tokenizer.bpe");
    Rng rng(11);
    auto docs = [&](int n, std::int64_t len) {
      text::TokenDocuments d;
      for (int k = 0; k < n; ++k) {
        std::vector<std::int32_t> t(static_cast<std::size_t>(len + k));
        std::int32_t cur = static_cast<std::int32_t>(rng.below(40));
        for (auto& x : t) {
          x = cur;
          cur = rng.below(4) == 0 ? static_cast<std::int32_t>(rng.below(40)) : (cur * 7 + 3) % 40;
        }
        d.add(t);
      }
      return d;
    };
    text::write_token_file(path + "/train.tokens", docs(12, 90), kVocab, tok.digest());
    text::write_token_file(path + "/valid.tokens", docs(3, 60), kVocab, tok.digest());
  }
};

}  // namespace codistill::test_text
