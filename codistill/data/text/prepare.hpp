#pragma once
// Preparing a text corpus for training (what `codistill-prepare-text` runs): list the
// documents, hold some out, train the BPE vocabulary on the training documents, encode
// both splits and write them (docs/text-data.md):
//   OUT/tokenizer.bpe    the vocabulary (tokenizer.hpp)
//   OUT/tokenizer.json   the same as a Hugging Face tokenizer (tokenizer_json.hpp); with
//                        --tokenizer, a copy of the given file (and no tokenizer.bpe unless
//                        it is the project's own)
//   OUT/train.tokens     the training documents (token_file.hpp)
//   OUT/valid.tokens     the held-out documents
//   OUT/train.bin, OUT/valid.bin  with --llmc: the same splits as llm.c token shards
//                        (token_shard.hpp; each document led by the end-of-document token,
//                        as llm.c's preparation scripts write them), for data.kind tokens
//                        and for llm.c's own loader
//   OUT/prepare.json     what was done: options, document names of each split, counts
// Each file is written atomically; prepare.json last, so its presence says the folder is
// complete.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace codistill::data::text {

inline constexpr const char* kTokenizerFile = "tokenizer.bpe";
inline constexpr const char* kTrainFile = "train.tokens";
inline constexpr const char* kValidFile = "valid.tokens";
inline constexpr const char* kManifestFile = "prepare.json";

struct PrepareOptions {
  std::vector<std::string> corpus;  // folders and files
  std::string suffix = ".txt";      // of the files taken from folders
  std::int32_t vocab_size = 8192;
  double heldout_fraction = 0.05;
  std::uint64_t seed = 1;           // of the held-out split
  std::string out;
  bool force = false;               // replace the files of an earlier preparation
  std::string tokenizer;            // a tokenizer.json to encode with instead of training one
  bool llmc = false;                // also write the splits as llm.c shards (train.bin, valid.bin)
};

// A usage problem (bad option, folder already prepared): the command exits 2 on it.
struct PrepareUsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

struct SplitSummary {
  std::int64_t documents = 0, bytes = 0, tokens = 0, file_bytes = 0;
};

struct PrepareSummary {
  std::int64_t documents = 0, empty_skipped = 0;
  SplitSummary train, valid;
  std::int32_t vocab_size = 0;  // may be below the request when the corpus is small
  bool vocab_stopped_early = false;
  std::int64_t tokenizer_file_bytes = 0;
  std::string tokenizer_json_skipped;  // why no tokenizer.json was written, if not
  double read_s = 0, bpe_s = 0, encode_s = 0, write_s = 0, total_s = 0;
  std::string json() const;  // the summary as one JSON object
};

// Throws PrepareUsageError for bad options, a missing corpus or an output folder that
// already holds a preparation (without force); std::runtime_error for I/O failures.
PrepareSummary prepare_text(const PrepareOptions& options);

}  // namespace codistill::data::text
