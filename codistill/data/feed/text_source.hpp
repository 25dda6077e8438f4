#pragma once
// Language-model data for the trainer (data.kind text, docs/config.md): the prepared folder
// (data.path, made by codistill-prepare-text), the checks that the model fits it, the
// unigram baseline a user compares the loss with, and the batch source of phase 1
// (data/feed/batch_source.hpp) over WindowSampler.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codistill/data/data_options.hpp"
#include "codistill/data/text/tokens/token_file.hpp"
#include "codistill/data/text/tokens/window_sampler.hpp"
#include "codistill/data/feed/batch_source.hpp"

namespace codistill {

// The files of a prepared folder, opened (memory-mapped) and checked: both token files
// made with the folder's tokenizer and of the same vocabulary.
struct TextData {
  std::string path;
  std::unique_ptr<data::text::TokenFile> train, valid;
  std::int64_t vocab = 0;
};

// Throws ConfigError naming data.path when the folder or one of its three files is missing,
// std::runtime_error (naming the file) when a file is invalid or made with another tokenizer.
TextData load_text_data(const DataConfig& cfg);

// Cross-entropy in nats per token of the training tokens' own unigram distribution: the
// loss of a model that ignores the context and predicts token frequencies. Counts the
// stream the sampler draws from: every token plus one end-of-document token per document.
double unigram_cross_entropy(const data::text::TokenFile& train);

// Phase 1 for text: step s's windows of this worker, a pure function of (seed, worker, s).
// A rank of a group of R draws the group's R x B windows and keeps rows [rank B, (rank+1) B).
class TextBatchSource final : public BatchSource {
 public:
  // options.batch_size: this rank's B. Keeps a pointer to `train` (must outlive this).
  TextBatchSource(const data::text::TokenFile& train, data::text::WindowOptions options, RankSlice slice = {});
  // Windows of `stream`, this worker's shard already (LmData::train), over a vocabulary.
  TextBatchSource(std::shared_ptr<const data::text::TokenStream> stream, std::int64_t vocab,
                  data::text::WindowOptions options, RankSlice slice = {});
  BatchLayout layout(std::int64_t rows) const override;
  void load(std::int64_t step, HostBatch& into, HostBatch* next) override;
  SourceState checkpoint_state() const override;
  void restore(const SourceStateReader& read) override;
  std::string describe() const override;
  // The group's windows of a step ([R B, T + 1], row-major), as load() reads them.
  std::vector<std::int32_t> group_windows(std::int64_t step) const;

 private:
  std::int64_t vocab_;
  data::text::WindowSampler sampler_;  // batch R x B
  RankSlice slice_;
  std::int64_t rows_;  // B
  std::vector<std::int32_t> windows_;
};

}  // namespace codistill
