#pragma once
// Language-model token shards as nanoGPT and llm.c write them (data.kind tokens,
// docs/data.md): one flat stream of token ids per file, documents already separated by the
// tokenizer's end-of-text token (GPT-2's 50256).
//
//   llm.c:   a header of 256 little-endian int32 — [0] magic 20240520, [1] version (1:
//            uint16 tokens, 2: uint32 tokens), [2] the token count — then the tokens;
//            recognized by its magic.
//   nanoGPT: no header, the tokens alone (np.memmap of uint16 in its prepare.py); the width
//            must be given (data.token_dtype), since nothing in the file says it.
// Read through a read-only memory map. Opening checks the header and the length; every
// token is checked against the vocabulary once (check_vocab). Errors are std::runtime_error
// starting with the path.
#include <cstdint>
#include <span>
#include <string>

#include <memory>
#include <vector>

#include "codistill/data/mapped_file.hpp"
#include "codistill/data/text/tokens/stream.hpp"

namespace codistill::data::text {

inline constexpr std::int32_t kLlmcMagic = 20240520;
inline constexpr std::size_t kLlmcHeaderBytes = 256 * 4;

enum class ShardFormat { llmc, raw };

class TokenShard {
 public:
  // token_bytes: 2 or 4 for a headerless file, 0 when not given (a headerless file is then
  // an error naming data.token_dtype); an llm.c file's header decides and must agree with a
  // width that was given.
  TokenShard(const std::string& path, int token_bytes);

  const std::string& path() const { return map_.path(); }
  ShardFormat format() const { return format_; }
  int token_bytes() const { return width_; }
  std::int64_t size() const { return tokens_; }
  // Copies tokens [begin, begin + n) as int32; unchecked beyond a debug assert (hot path).
  void copy(std::int64_t begin, std::int64_t n, std::int32_t* out) const;
  // Throws naming the file, the offset (in tokens) and the token of the first id outside
  // [0, vocab).
  void check_vocab(std::int64_t vocab) const;
  // The largest id (scans the file).
  std::int64_t max_token() const;

 private:
  MappedFile map_;
  ShardFormat format_ = ShardFormat::raw;
  int width_ = 2;
  std::int64_t tokens_ = 0;
  const std::uint8_t* data_ = nullptr;
};

// Shards read back to back as one stream, in the order given. A window may run from the end
// of one shard into the next: shards hold whole documents separated by the end-of-text
// token (llm.c starts every shard with it), so that is a document boundary like any other.
class ShardStream final : public TokenStream {
 public:
  // `shards` must outlive the stream; `of` is how many shards the whole split has.
  ShardStream(std::vector<const TokenShard*> shards, std::size_t of);
  std::int64_t size() const override { return starts_.back(); }
  void copy(std::int64_t begin, std::span<std::int32_t> out) const override;
  std::string describe() const override;
  std::string origin() const override;

 private:
  std::vector<const TokenShard*> shards_;
  std::vector<std::int64_t> starts_;  // stream position of each shard; back() = size()
  std::size_t of_;
};

// Writes tokens as an llm.c shard (version 1 when every id fits uint16, else 2), atomically.
// Throws std::invalid_argument for a negative id.
void write_llmc_shard(const std::string& path, std::span<const std::int32_t> tokens);

}  // namespace codistill::data::text
