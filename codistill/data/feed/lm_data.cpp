#include "codistill/data/feed/lm_data.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "codistill/data/feed/data_identity.hpp"
#include "codistill/data/feed/text_source.hpp"
#include "codistill/data/text/tokens/token_shard.hpp"
#include "codistill/data/text/tokens/window_sampler.hpp"
#include "codistill/util/config_error.hpp"

namespace codistill {
namespace {

namespace text = data::text;

class PreparedText final : public LmData {
 public:
  explicit PreparedText(TextData d) : d_(std::move(d)) {}
  const char* kind() const override { return "text"; }
  std::int64_t vocab() const override { return d_.vocab; }
  std::shared_ptr<const text::TokenStream> train(data::ShardMode mode, int worker, int workers) const override {
    return std::make_shared<text::DocumentStream>(*d_.train, text::shard_documents(*d_.train, mode, worker, workers));
  }
  std::shared_ptr<const text::TokenStream> valid() const override {
    std::vector<std::int64_t> all(static_cast<std::size_t>(d_.valid->documents()));
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int64_t>(i);
    return std::make_shared<text::DocumentStream>(*d_.valid, std::move(all));
  }
  std::int64_t train_tokens() const override { return d_.train->tokens(); }
  double unigram_cross_entropy() const override { return codistill::unigram_cross_entropy(*d_.train); }
  std::string describe() const override {
    return fmt::format("text from {}: {} training tokens in {} documents", d_.path, d_.train->tokens(),
                       d_.train->documents());
  }

 private:
  TextData d_;
};

class TokenShards final : public LmData {
 public:
  TokenShards(const DataConfig& cfg, std::int64_t vocab) : vocab_(vocab) {
    const int width = cfg.token_dtype == "uint16" ? 2 : cfg.token_dtype == "uint32" ? 4 : 0;
    for (const std::string& f : glob_files("data.train", cfg.train, cfg.path))
      train_.push_back(std::make_unique<text::TokenShard>(f, width));
    for (const std::string& f : glob_files("data.valid", cfg.valid, cfg.path))
      valid_.push_back(std::make_unique<text::TokenShard>(f, width));
    check_vocab();
    for (const auto& s : train_) tokens_ += s->size();
  }
  const char* kind() const override { return "tokens"; }
  std::int64_t vocab() const override { return vocab_; }
  std::shared_ptr<const text::TokenStream> train(data::ShardMode mode, int worker, int workers) const override {
    std::vector<const text::TokenShard*> mine;
    if (mode == data::ShardMode::disjoint && train_.size() < static_cast<std::size_t>(workers))
      throw std::invalid_argument(fmt::format("data.train: {} shard files, too few for {} workers with data.shard "
                                              "disjoint (each takes every {}-th file; data.shard full gives every "
                                              "worker all of them)", train_.size(), workers, workers));
    for (std::size_t i = 0; i < train_.size(); ++i)
      if (mode != data::ShardMode::disjoint || i % static_cast<std::size_t>(workers) == static_cast<std::size_t>(worker))
        mine.push_back(train_[i].get());
    return std::make_shared<text::ShardStream>(std::move(mine), train_.size());
  }
  std::shared_ptr<const text::TokenStream> valid() const override {
    std::vector<const text::TokenShard*> all;
    for (const auto& s : valid_) all.push_back(s.get());
    return std::make_shared<text::ShardStream>(std::move(all), valid_.size());
  }
  std::int64_t train_tokens() const override { return tokens_; }
  double unigram_cross_entropy() const override;
  std::string describe() const override {
    return fmt::format("token shards: {} training tokens in {} files ({}, {}-bit), {} held-out files", tokens_,
                       train_.size(), train_.front()->format() == text::ShardFormat::llmc ? "llm.c" : "headerless",
                       8 * train_.front()->token_bytes(), valid_.size());
  }

 private:
  void check_vocab() const {
    std::vector<const text::TokenShard*> all;
    for (const auto& s : train_) all.push_back(s.get());
    for (const auto& s : valid_) all.push_back(s.get());
    std::vector<std::string> errors(all.size());
#pragma omp parallel for schedule(dynamic, 1)
    for (std::size_t i = 0; i < all.size(); ++i) {
      try {
        all[i]->check_vocab(vocab_);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    }
    for (const std::string& e : errors)
      if (!e.empty()) throw std::runtime_error(e);
  }

  std::int64_t vocab_;
  std::vector<std::unique_ptr<text::TokenShard>> train_, valid_;
  std::int64_t tokens_ = 0;
};

double TokenShards::unigram_cross_entropy() const {
  // Counted over at most the first 2^26 tokens: the baseline is a reference line in the
  // log, and a corpus of billions of tokens would cost seconds at start for one digit more.
  constexpr std::int64_t kMaxCounted = std::int64_t{1} << 26;
  std::vector<std::int64_t> counts(static_cast<std::size_t>(vocab_), 0);
  std::vector<std::int32_t> buf(1 << 16);
  std::int64_t counted = 0;
  for (const auto& s : train_) {
    for (std::int64_t at = 0; at < s->size() && counted < kMaxCounted;) {
      const std::int64_t n = std::min<std::int64_t>({s->size() - at, static_cast<std::int64_t>(buf.size()),
                                                     kMaxCounted - counted});
      s->copy(at, n, buf.data());
      for (std::int64_t i = 0; i < n; ++i) ++counts[static_cast<std::size_t>(buf[static_cast<std::size_t>(i)])];
      at += n;
      counted += n;
    }
  }
  double h = 0;
  for (std::int64_t c : counts)
    if (c > 0) h -= static_cast<double>(c) / counted * std::log(static_cast<double>(c) / counted);
  return h;
}

}  // namespace

std::unique_ptr<LmData> load_lm_data(const DataConfig& cfg, std::int64_t model_vocab) {
  if (cfg.kind == "text") return std::make_unique<PreparedText>(load_text_data(cfg));
  if (cfg.kind != "tokens") throw std::logic_error("load_lm_data: data.kind " + cfg.kind + " is not a token corpus");
  if (model_vocab <= 0)
    throw ConfigError("model.vocab_size", "", 0, "data.kind tokens needs model.vocab_size: token shards do not "
                                                 "record their vocabulary (GPT-2's is 50257, 50304 padded)");
  return std::make_unique<TokenShards>(cfg, model_vocab);
}

}  // namespace codistill
