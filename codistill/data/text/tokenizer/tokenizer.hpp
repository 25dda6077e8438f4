#pragma once
// The byte-level BPE tokenizer of the text data (docs/text-data.md).
//
// Token ids: 0..255 are the bytes themselves, 256 is the end-of-document token (it never
// comes out of encoding text: the sampler puts it between documents), and 257 + i is the
// token made by merge i, the concatenation of merge i's two tokens. The vocabulary is
// therefore fully described by its ordered list of merges, and any byte string has an
// encoding (the bytes alone): decode(encode(s)) == s for every s.
//
// Encoding splits the text into chunks (pretokenize.hpp) and, in each chunk, applies the
// merges present in order of their rank: repeatedly the lowest-ranked adjacent pair is
// replaced, left to right, everywhere in the chunk. This reproduces exactly what training
// did to the same chunk (a pair made of a newer token always ranks after it).
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace codistill::data::text {

inline constexpr std::int32_t kEndOfDocument = 256;
inline constexpr std::int32_t kFirstMergeToken = 257;

struct Merge {
  std::int32_t left = 0, right = 0;
  bool operator==(const Merge&) const = default;
};

class Tokenizer {
 public:
  // Bytes and the end-of-document token only (vocabulary 257).
  Tokenizer();
  // Throws std::invalid_argument unless every merge i joins two tokens that exist before
  // it (ids < 257 + i) and are not the end-of-document token, and no pair repeats.
  explicit Tokenizer(std::vector<Merge> merges);

  std::int32_t vocab_size() const { return kFirstMergeToken + static_cast<std::int32_t>(merges_.size()); }
  const std::vector<Merge>& merges() const { return merges_; }
  // XXH64 (seed 0) of the pre-tokenizer's name, a zero byte and the merges as
  // little-endian int32 pairs: what a token file records to name its tokenizer.
  std::uint64_t digest() const { return digest_; }

  // Appends the tokens of text to out. Stateless and thread-safe; Encoder (below) is the
  // fast way to encode much text.
  void encode(std::string_view text, std::vector<std::int32_t>& out) const;
  std::vector<std::int32_t> encode(std::string_view text) const;
  // Appends the tokens of one chunk (no pre-splitting); std::invalid_argument for a chunk
  // longer than kMaxChunkBytes (pretokenize.hpp).
  void encode_chunk(std::string_view chunk, std::vector<std::int32_t>& out) const;

  // The bytes of each token concatenated; the end-of-document token contributes nothing.
  // Throws std::out_of_range for an id outside [0, vocab_size()).
  std::string decode(std::span<const std::int32_t> tokens) const;
  std::string_view token_bytes(std::int32_t id) const;

  // The vocabulary file (format in docs/text-data.md), written atomically; load checks
  // its structure, every merge and its checksum, and throws std::runtime_error naming the
  // file and the line.
  void save(const std::string& path) const;
  static Tokenizer load(const std::string& path);
  std::string to_text() const;
  static Tokenizer from_text(std::string_view text, const std::string& name);

 private:
  std::vector<Merge> merges_;
  std::unordered_map<std::uint64_t, std::int32_t> rank_;  // pair key -> merge index
  std::vector<std::string> bytes_;                        // per token id
  std::uint64_t digest_ = 0;
};

// Encodes with a cache of the chunks seen so far: natural text repeats its chunks, so
// most of them are encoded once (several times faster on the Python docs). Not
// thread-safe; one per thread. The cache is dropped when it reaches `max_entries`.
class Encoder {
 public:
  explicit Encoder(const Tokenizer& tokenizer, std::size_t max_entries = 1 << 20)
      : tok_(&tokenizer), max_entries_(max_entries) {}
  void encode(std::string_view text, std::vector<std::int32_t>& out);

 private:
  const Tokenizer* tok_;
  std::size_t max_entries_;
  // Looked up by string_view (no string built per chunk that is already cached).
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::vector<std::int32_t>, Hash, std::equal_to<>> cache_;
};

inline std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
}

}  // namespace codistill::data::text
