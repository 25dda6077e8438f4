#pragma once
// A general byte-level BPE model: what a Hugging Face `tokenizer.json` of the GPT-2 family
// describes (tokenizer_json.hpp), and the project's own Tokenizer as one instance of it
// (BpeModel::from_tokenizer). Encoding reproduces `tokenizers` exactly:
//   1. added tokens (e.g. <|endoftext|>) are cut out of the text, leftmost-longest, first
//      those matched on the raw text ("normalized": false), then the others; each is its id;
//   2. the rest is pre-tokenized into words: GPT-2's regex (ByteLevel), the project's
//      chunks-v1 (pretokenize.hpp), or not at all;
//   3. each word starts as its bytes' tokens, and merges are applied as `tokenizers` does:
//      always the lowest-ranked pair present, among equal ranks the leftmost first.
// For the project's tokenizer (every merge joins tokens that exist before it) step 3 is
// exactly Tokenizer::encode_chunk, so both give the same ids.
#include <array>
#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "codistill/data/text/tokenizer/tokenizer.hpp"

namespace codistill::data::text {

class RegexSplitter;

enum class PreTokenizer {
  kGpt2,      // ByteLevel with its regex: GPT-2's pattern on the text
  kChunksV1,  // the project's chunks (pretokenize.hpp)
  kNone,      // ByteLevel without a regex: each piece is one word
};

struct AddedToken {
  std::string content;
  std::int32_t id = 0;
  bool normalized = false;  // matched after normalization (there is none), in a second pass
  bool special = false;
};

// What a tokenizer file says, before it is checked.
struct BpeModelSpec {
  // Tokens as the file writes them: byte-level strings (byte_level.hpp), each with its id.
  // A string outside the byte-level alphabet is kept (its id decodes to its UTF-8) but can
  // never come out of the merges.
  std::vector<std::pair<std::string, std::int32_t>> vocab;
  struct Merge {
    std::int32_t left, right, result;
  };
  std::vector<Merge> merges;  // by rank; a later merge of the same pair replaces an earlier

  std::vector<AddedToken> added;
  PreTokenizer pre_tokenizer = PreTokenizer::kGpt2;
  bool add_prefix_space = false;  // ByteLevel's: a space before each piece lacking one
  bool ignore_merges = false;     // a word that is a token is that token, merges unused
  std::int32_t end_of_document = -1;  // an added token's id, or -1: none
};

class BpeModel {
 public:
  // Throws std::invalid_argument when the spec is inconsistent: a byte without a token, two
  // tokens with one id, a merge of unknown ids or whose result is not a token, ...
  explicit BpeModel(BpeModelSpec spec);
  // The project's tokenizer: ids 0..255 the bytes, 256 the end of document (added token
  // <|endoftext|>), 257 + i merge i, chunks-v1.
  static BpeModel from_tokenizer(const Tokenizer& tokenizer);

  const BpeModelSpec& spec() const { return spec_; }
  std::int32_t vocab_size() const { return vocab_size_; }  // the largest id + 1
  std::int32_t end_of_document() const { return spec_.end_of_document; }
  // The project's Tokenizer::digest when this is exactly the project's tokenizer, so that
  // either file names the same token files; else a hash of everything that makes the ids.
  std::uint64_t digest() const { return digest_; }
  // The project's tokenizer this is, when it is one (see from_tokenizer).
  const std::optional<Tokenizer>& as_project_tokenizer() const { return project_; }

  // Appends the ids of text. `cache` (word bytes -> ids) may be null; see BpeEncoder.
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using WordCache = std::unordered_map<std::string, std::vector<std::int32_t>, Hash, std::equal_to<>>;
  void encode(std::string_view text, std::vector<std::int32_t>& out, WordCache* cache = nullptr) const;
  std::vector<std::int32_t> encode(std::string_view text) const;
  void encode_word(std::string_view word, std::vector<std::int32_t>& out) const;

  // An id's bytes (an added token: its content); std::out_of_range for an unused id.
  std::string_view token_bytes(std::int32_t id) const;
  std::string decode(std::span<const std::int32_t> ids) const;

 private:
  struct MergeTarget {
    std::int32_t rank, id;
  };
  void check_and_index();
  void encode_piece(std::string_view piece, std::vector<std::int32_t>& out, WordCache* cache) const;
  void encode_added(std::string_view text, bool normalized_pass, std::vector<std::int32_t>& out,
                    WordCache* cache) const;
  std::uint64_t compute_digest();  // also sets project_

  BpeModelSpec spec_;
  std::int32_t vocab_size_ = 0;
  std::array<std::int32_t, 256> byte_id_{};
  std::vector<std::optional<std::string>> bytes_;          // per id
  std::unordered_map<std::string, std::int32_t> id_of_;  // token bytes -> id (the model's)
  std::unordered_map<std::uint64_t, MergeTarget> merge_;  // pair_key(left, right)
  std::shared_ptr<const RegexSplitter> regex_;
  std::optional<Tokenizer> project_;
  std::uint64_t digest_ = 0;
};

// Encodes with a cache of the words seen so far (natural text repeats its words). Not
// thread-safe; one per thread. The cache is dropped when it reaches `max_entries`.
class BpeEncoder {
 public:
  explicit BpeEncoder(const BpeModel& model, std::size_t max_entries = 1 << 20) : model_(&model), max_(max_entries) {}
  void encode(std::string_view text, std::vector<std::int32_t>& out) {
    if (cache_.size() >= max_) cache_.clear();
    model_->encode(text, out, &cache_);
  }

 private:
  const BpeModel* model_;
  std::size_t max_;
  BpeModel::WordCache cache_;
};

// GPT-2's pre-tokenizer pattern, with \s as Unicode White_Space (what Oniguruma's \s is in
// `tokenizers`; PCRE2's \s would also take U+180E).
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\p{White_Space}\p{L}\p{N}]+|\p{White_Space}+(?![^\p{White_Space}])|\p{White_Space}+)";

}  // namespace codistill::data::text
