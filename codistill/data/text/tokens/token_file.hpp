#pragma once
// The prepared-token file (`*.tokens`, format v1, docs/text-data.md): the documents of one
// split as token ids, read through a read-only memory map.
//
//   offset  bytes  field (little-endian)
//        0      8  magic "CDTOKENS"
//        8      4  format version (1)
//       12      4  token width in bytes: 2 (uint16) when vocab_size <= 65536, else 4
//       16      4  vocab_size
//       20      4  end-of-document token id (256 for the project's tokenizer; < vocab_size)
//       24      8  document count D
//       32      8  token count N
//       40      8  tokenizer digest (Tokenizer::digest of the tokenizer that made it)
//       48      8  payload digest: XXH64 (seed 0) of every byte from offset 64 to the end
//       56      8  header digest: XXH64 (seed 0) of bytes 0..55
//       64  8(D+1) document offsets: uint64, offsets[0] = 0, non-decreasing, offsets[D] = N;
//                  document d is tokens [offsets[d], offsets[d+1])
//  64+8(D+1)  N*w  the tokens (no end-of-document tokens: documents are separated by the
//                  offsets; the sampler joins them)
// The file is exactly that long. Opening checks all of it (every token < vocab_size, both
// digests) and throws std::runtime_error whose message starts with the path and says what
// is wrong; a file that opens is consistent.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codistill/data/mapped_file.hpp"

namespace codistill::data::text {

inline constexpr std::uint32_t kTokenFileVersion = 1;
inline constexpr std::size_t kTokenFileHeaderBytes = 64;

struct TokenFileInfo {
  std::uint32_t token_bytes = 2;
  std::uint32_t vocab_size = 0;
  std::uint64_t documents = 0;
  std::uint64_t tokens = 0;
  std::uint64_t tokenizer_digest = 0;
  std::uint64_t payload_digest = 0;
  std::uint32_t end_of_document = 256;
};

// Documents being collected for writing: tokens of all documents back to back and where
// each starts.
struct TokenDocuments {
  std::vector<std::uint64_t> offsets{0};
  std::vector<std::int32_t> tokens;
  void add(std::span<const std::int32_t> document);
  std::uint64_t documents() const { return offsets.size() - 1; }
};

// 2 when every id of a vocabulary of this size fits in uint16, else 4.
std::uint32_t token_width(std::uint32_t vocab_size);

// Writes the file atomically (atomic_write.hpp). Throws std::invalid_argument when a
// token is outside [0, vocab_size) or the offsets are inconsistent, std::runtime_error
// naming the path for I/O errors. Returns what the header says.
TokenFileInfo write_token_file(const std::string& path, const TokenDocuments& docs, std::uint32_t vocab_size,
                               std::uint64_t tokenizer_digest, std::uint32_t end_of_document = 256);

class TokenFile {
 public:
  explicit TokenFile(const std::string& path);

  const std::string& path() const { return map_.path(); }
  const TokenFileInfo& info() const { return info_; }
  std::int64_t documents() const { return static_cast<std::int64_t>(info_.documents); }
  std::int64_t tokens() const { return static_cast<std::int64_t>(info_.tokens); }
  std::int64_t file_bytes() const { return static_cast<std::int64_t>(map_.size()); }
  std::int64_t document_begin(std::int64_t d) const;  // d in [0, documents()]
  std::int64_t document_size(std::int64_t d) const { return document_begin(d + 1) - document_begin(d); }
  // Copies tokens [begin, begin + n) as int32 into out. Unchecked beyond a debug assert:
  // the sampler's hot path.
  void copy_tokens(std::int64_t begin, std::int64_t n, std::int32_t* out) const;
  std::vector<std::int32_t> document(std::int64_t d) const;

  // Throws std::runtime_error naming this file unless it was made with the tokenizer of
  // this digest (`tokenizer_path` is named in the message).
  void require_tokenizer(std::uint64_t digest, const std::string& tokenizer_path) const;

 private:
  MappedFile map_;
  TokenFileInfo info_;
  const std::uint8_t* offsets_ = nullptr;
  const std::uint8_t* tokens_ = nullptr;
};

}  // namespace codistill::data::text
