#pragma once
// The corpus of a language-model run, whichever form it comes in (docs/data.md):
//   data.kind text:   a folder prepared by codistill-prepare-text (tokenizer.bpe,
//                     train.tokens, valid.tokens; documents, sharded by document);
//   data.kind tokens: token shards as nanoGPT and llm.c write them (data.train and
//                     data.valid, file globs; sharded by file).
// The text modality (train/modality_text.cpp) reads either through this interface: the
// vocabulary, this worker's training stream, the held-out stream, and what the log says.
#include <cstdint>
#include <memory>
#include <string>

#include "codistill/data/data_options.hpp"
#include "codistill/data/sampler.hpp"
#include "codistill/data/text/tokens/stream.hpp"

namespace codistill {

class LmData {
 public:
  virtual ~LmData() = default;
  virtual const char* kind() const = 0;  // "text" | "tokens"
  virtual std::int64_t vocab() const = 0;
  // Worker `worker` of `workers`'s training stream under the shard mode.
  virtual std::shared_ptr<const data::text::TokenStream> train(data::ShardMode mode, int worker,
                                                               int workers) const = 0;
  virtual std::shared_ptr<const data::text::TokenStream> valid() const = 0;
  virtual std::int64_t train_tokens() const = 0;
  // Cross-entropy in nats per token of the training tokens' own unigram distribution: the
  // loss of a model that ignores the context (see unigram_cross_entropy, text_source.hpp).
  virtual double unigram_cross_entropy() const = 0;
  virtual std::string describe() const = 0;  // for the log: where the tokens are, how many
};

// Opens the corpus of cfg (kind text or tokens). model_vocab: the model's vocab_size (0 =
// not given). Kind tokens needs it (shards do not record their vocabulary) and checks every
// token against it. Throws ConfigError naming the key for a missing folder, file or value,
// std::runtime_error naming the file for a malformed one.
std::unique_ptr<LmData> load_lm_data(const DataConfig& cfg, std::int64_t model_vocab);

}  // namespace codistill
