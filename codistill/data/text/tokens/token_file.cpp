#include "codistill/data/text/tokens/token_file.hpp"

#include <xxhash.h>

#include <bit>
#include <cassert>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "codistill/data/text/atomic_write.hpp"

namespace codistill::data::text {

// The format is little-endian and read in place: this reader only runs where that is the
// native order (every platform this project builds for).
static_assert(std::endian::native == std::endian::little, "token files are read in place as little-endian");

namespace {

constexpr char kMagic[8] = {'C', 'D', 'T', 'O', 'K', 'E', 'N', 'S'};

template <class T>
T load(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
void store(std::uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

std::string hex64(std::uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": invalid token file: " + what);
}

}  // namespace

void TokenDocuments::add(std::span<const std::int32_t> document) {
  tokens.insert(tokens.end(), document.begin(), document.end());
  offsets.push_back(tokens.size());
}

std::uint32_t token_width(std::uint32_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

TokenFileInfo write_token_file(const std::string& path, const TokenDocuments& docs, std::uint32_t vocab_size,
                               std::uint64_t tokenizer_digest, std::uint32_t end_of_document) {
  if (docs.offsets.empty() || docs.offsets.front() != 0 || docs.offsets.back() != docs.tokens.size())
    throw std::invalid_argument("write_token_file(" + path + "): offsets must start at 0 and end at the token count");
  for (std::size_t i = 1; i < docs.offsets.size(); ++i)
    if (docs.offsets[i] < docs.offsets[i - 1])
      throw std::invalid_argument("write_token_file(" + path + "): document offsets decrease at document " +
                                  std::to_string(i - 1));
  TokenFileInfo info;
  info.vocab_size = vocab_size;
  info.token_bytes = token_width(vocab_size);
  info.documents = docs.documents();
  info.tokens = docs.tokens.size();
  info.tokenizer_digest = tokenizer_digest;
  info.end_of_document = end_of_document;
  if (end_of_document >= vocab_size)
    throw std::invalid_argument("write_token_file(" + path + "): end-of-document id " + std::to_string(end_of_document) +
                                " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");

  // The payload in its on-disk form, hashed as it is built.
  std::vector<std::uint8_t> payload(8 * docs.offsets.size() + info.token_bytes * docs.tokens.size());
  std::memcpy(payload.data(), docs.offsets.data(), 8 * docs.offsets.size());
  std::uint8_t* t = payload.data() + 8 * docs.offsets.size();
  for (std::size_t i = 0; i < docs.tokens.size(); ++i) {
    const std::int32_t v = docs.tokens[i];
    if (v < 0 || static_cast<std::uint32_t>(v) >= vocab_size)
      throw std::invalid_argument("write_token_file(" + path + "): token " + std::to_string(v) + " at position " +
                                  std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
    if (info.token_bytes == 2)
      store(t + 2 * i, static_cast<std::uint16_t>(v));
    else
      store(t + 4 * i, static_cast<std::uint32_t>(v));
  }
  info.payload_digest = XXH64(payload.data(), payload.size(), 0);

  std::uint8_t header[kTokenFileHeaderBytes] = {};
  std::memcpy(header, kMagic, 8);
  store(header + 8, kTokenFileVersion);
  store(header + 12, info.token_bytes);
  store(header + 16, info.vocab_size);
  store(header + 20, info.end_of_document);
  store(header + 24, info.documents);
  store(header + 32, info.tokens);
  store(header + 40, info.tokenizer_digest);
  store(header + 48, info.payload_digest);
  store(header + 56, static_cast<std::uint64_t>(XXH64(header, 56, 0)));
  write_file_atomically(path, [&](const ByteSink& sink) {
    sink(header, sizeof header);
    sink(payload.data(), payload.size());
  });
  return info;
}

TokenFile::TokenFile(const std::string& path) : map_(path) {
  const std::uint8_t* p = map_.data();
  const std::uint64_t size = map_.size();
  if (size < 8 || std::memcmp(p, kMagic, 8) != 0)
    fail(path, size < 8 ? "too short to be a token file (" + std::to_string(size) + " bytes)"
                        : "bad magic: the file does not start with \"CDTOKENS\" (not a token file)");
  if (size < kTokenFileHeaderBytes)
    fail(path, "truncated header: " + std::to_string(size) + " bytes, the header alone is " +
                   std::to_string(kTokenFileHeaderBytes));
  const auto version = load<std::uint32_t>(p + 8);
  if (version != kTokenFileVersion)
    fail(path, "format version " + std::to_string(version) + ", this program reads version " +
                   std::to_string(kTokenFileVersion));
  const auto header_digest = load<std::uint64_t>(p + 56);
  if (header_digest != XXH64(p, 56, 0))
    fail(path, "header checksum mismatch (stored " + hex64(header_digest) + ", computed " +
                   hex64(XXH64(p, 56, 0)) + "): the header is damaged");
  info_.token_bytes = load<std::uint32_t>(p + 12);
  info_.vocab_size = load<std::uint32_t>(p + 16);
  info_.end_of_document = load<std::uint32_t>(p + 20);
  info_.documents = load<std::uint64_t>(p + 24);
  info_.tokens = load<std::uint64_t>(p + 32);
  info_.tokenizer_digest = load<std::uint64_t>(p + 40);
  info_.payload_digest = load<std::uint64_t>(p + 48);
  if (info_.vocab_size < 257)
    fail(path, "vocab_size " + std::to_string(info_.vocab_size) + " is below 257 (256 bytes + end-of-document)");
  if (info_.token_bytes != token_width(info_.vocab_size))
    fail(path, "token width " + std::to_string(info_.token_bytes) + " bytes does not match vocab_size " +
                   std::to_string(info_.vocab_size) + " (expected " + std::to_string(token_width(info_.vocab_size)) + ")");
  // 256 for the project's tokenizer; a tokenizer.json's own (e.g. GPT-2's 50256).
  if (info_.end_of_document >= info_.vocab_size)
    fail(path, "end-of-document token " + std::to_string(info_.end_of_document) + " is outside the vocabulary [0, " +
                   std::to_string(info_.vocab_size) + ")");
  // Sizes: 64 + 8 (D + 1) + w N must be the file's size; checked without overflow.
  const std::uint64_t room = size - kTokenFileHeaderBytes;
  if (info_.documents >= room / 8)
    fail(path, "size mismatch: the header declares " + std::to_string(info_.documents) +
                   " documents, whose offsets table alone exceeds the file's " + std::to_string(size) + " bytes (truncated?)");
  const std::uint64_t table = 8 * (info_.documents + 1);
  const std::uint64_t token_room = room - table;
  if (info_.tokens > token_room / info_.token_bytes || token_room != info_.tokens * info_.token_bytes)
    fail(path, "size mismatch: the header declares " + std::to_string(info_.documents) + " documents and " +
                   std::to_string(info_.tokens) + " tokens of " + std::to_string(info_.token_bytes) +
                   " bytes, the file has " + std::to_string(size) + " bytes" +
                   (info_.tokens > token_room / info_.token_bytes ? " (truncated?)" : " (trailing bytes?)"));
  const std::uint64_t payload_digest = XXH64(p + kTokenFileHeaderBytes, room, 0);
  if (payload_digest != info_.payload_digest)
    fail(path, "payload checksum mismatch (stored " + hex64(info_.payload_digest) + ", computed " +
                   hex64(payload_digest) + "): the offsets or tokens are damaged");
  offsets_ = p + kTokenFileHeaderBytes;
  tokens_ = offsets_ + table;
  std::uint64_t prev = load<std::uint64_t>(offsets_);
  if (prev != 0) fail(path, "the first document offset is " + std::to_string(prev) + ", expected 0");
  for (std::uint64_t d = 1; d <= info_.documents; ++d) {
    const auto o = load<std::uint64_t>(offsets_ + 8 * d);
    if (o < prev || o > info_.tokens)
      fail(path, "document offset " + std::to_string(d) + " is " + std::to_string(o) + ", outside [" +
                     std::to_string(prev) + ", " + std::to_string(info_.tokens) + "]");
    prev = o;
  }
  if (prev != info_.tokens)
    fail(path, "the last document offset is " + std::to_string(prev) + ", expected the token count " +
                   std::to_string(info_.tokens));
  for (std::uint64_t i = 0; i < info_.tokens; ++i) {
    const std::uint32_t v = info_.token_bytes == 2 ? load<std::uint16_t>(tokens_ + 2 * i) : load<std::uint32_t>(tokens_ + 4 * i);
    if (v >= info_.vocab_size)
      fail(path, "token " + std::to_string(v) + " at position " + std::to_string(i) + " is outside the vocabulary [0, " +
                     std::to_string(info_.vocab_size) + ")");
  }
}

std::int64_t TokenFile::document_begin(std::int64_t d) const {
  if (d < 0 || d > documents())
    throw std::out_of_range(path() + ": document " + std::to_string(d) + " outside [0, " + std::to_string(documents()) + "]");
  return static_cast<std::int64_t>(load<std::uint64_t>(offsets_ + 8 * static_cast<std::size_t>(d)));
}

void TokenFile::copy_tokens(std::int64_t begin, std::int64_t n, std::int32_t* out) const {
  assert(begin >= 0 && n >= 0 && begin + n <= tokens());
  if (n == 0) return;  // an empty document: `out` may be null, which memcpy must not see
  if (info_.token_bytes == 2) {
    const std::uint8_t* src = tokens_ + 2 * static_cast<std::size_t>(begin);
    for (std::int64_t i = 0; i < n; ++i) out[i] = load<std::uint16_t>(src + 2 * i);
  } else {
    std::memcpy(out, tokens_ + 4 * static_cast<std::size_t>(begin), 4 * static_cast<std::size_t>(n));
  }
}

std::vector<std::int32_t> TokenFile::document(std::int64_t d) const {
  const std::int64_t b = document_begin(d), e = document_begin(d + 1);
  std::vector<std::int32_t> out(static_cast<std::size_t>(e - b));
  copy_tokens(b, e - b, out.data());
  return out;
}

void TokenFile::require_tokenizer(std::uint64_t digest, const std::string& tokenizer_path) const {
  if (digest != info_.tokenizer_digest)
    throw std::runtime_error(path() + ": made with another tokenizer (digest " + hex64(info_.tokenizer_digest) +
                             ") than " + tokenizer_path + " (digest " + hex64(digest) + "): prepare the data again");
}

}  // namespace codistill::data::text
