#include "codistill/data/text/tokens/token_shard.hpp"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "codistill/data/text/atomic_write.hpp"

namespace codistill::data::text {
namespace {

std::int32_t header_word(const std::uint8_t* p, int i) {
  std::int32_t v;
  std::memcpy(&v, p + 4 * i, 4);
  return v;
}

template <class T>
std::int64_t first_at_or_above(const std::uint8_t* data, std::int64_t n, std::int64_t vocab, std::int64_t& largest) {
  const T* t = reinterpret_cast<const T*>(data);
  T top = 0;
  for (std::int64_t i = 0; i < n; ++i) top = std::max(top, t[i]);
  largest = static_cast<std::int64_t>(top);
  if (vocab < 0 || largest < vocab) return -1;
  for (std::int64_t i = 0; i < n; ++i)
    if (static_cast<std::int64_t>(t[i]) >= vocab) return i;
  return -1;
}

}  // namespace

TokenShard::TokenShard(const std::string& path, int token_bytes) : map_(path) {
  if (token_bytes != 0 && token_bytes != 2 && token_bytes != 4)
    throw std::invalid_argument(path + ": token width " + std::to_string(token_bytes) + " (valid: 2, 4)");
  const std::size_t n = map_.size();
  if (n >= kLlmcHeaderBytes && header_word(map_.data(), 0) == kLlmcMagic) {
    format_ = ShardFormat::llmc;
    const std::int32_t version = header_word(map_.data(), 1);
    if (version != 1 && version != 2)
      throw std::runtime_error(path + ": llm.c shard of version " + std::to_string(version) +
                               " (valid: 1 = uint16 tokens, 2 = uint32 tokens)");
    width_ = version == 1 ? 2 : 4;
    if (token_bytes != 0 && token_bytes != width_)
      throw std::runtime_error(path + ": data.token_dtype says " + std::to_string(8 * token_bytes) +
                               "-bit tokens but this llm.c shard (version " + std::to_string(version) + ") holds " +
                               std::to_string(8 * width_) + "-bit ones");
    const std::int64_t count = header_word(map_.data(), 2);
    const std::uint64_t have = (n - kLlmcHeaderBytes) / static_cast<std::uint64_t>(width_);
    if (count < 0 || static_cast<std::uint64_t>(count) != have || (n - kLlmcHeaderBytes) % width_ != 0)
      throw std::runtime_error(path + ": llm.c header announces " + std::to_string(count) + " tokens, the file holds " +
                               std::to_string(n - kLlmcHeaderBytes) + " bytes after the header (" +
                               (static_cast<std::uint64_t>(count) > have ? "truncated)" : "trailing bytes)"));
    tokens_ = count;
    data_ = map_.data() + kLlmcHeaderBytes;
    return;
  }
  if (token_bytes == 0)
    throw std::runtime_error(path + ": no llm.c header (magic " + std::to_string(kLlmcMagic) +
                             "): a headerless nanoGPT .bin needs data.token_dtype (uint16 or uint32)");
  width_ = token_bytes;
  if (n % static_cast<std::size_t>(width_) != 0)
    throw std::runtime_error(path + ": " + std::to_string(n) + " bytes is not a whole number of " +
                             std::to_string(8 * width_) + "-bit tokens");
  tokens_ = static_cast<std::int64_t>(n) / width_;
  data_ = map_.data();
}

void TokenShard::copy(std::int64_t begin, std::int64_t n, std::int32_t* out) const {
  assert(begin >= 0 && n >= 0 && begin + n <= tokens_);
  if (width_ == 4) {
    std::memcpy(out, data_ + 4 * begin, static_cast<std::size_t>(n) * 4);
    return;
  }
  std::uint16_t v;
  for (std::int64_t i = 0; i < n; ++i) {
    std::memcpy(&v, data_ + 2 * (begin + i), 2);
    out[i] = v;
  }
}

std::int64_t TokenShard::max_token() const {
  std::int64_t largest = 0;
  if (width_ == 2) first_at_or_above<std::uint16_t>(data_, tokens_, -1, largest);
  else first_at_or_above<std::uint32_t>(data_, tokens_, -1, largest);
  return largest;
}

void TokenShard::check_vocab(std::int64_t vocab) const {
  std::int64_t largest = 0;
  const std::int64_t at = width_ == 2 ? first_at_or_above<std::uint16_t>(data_, tokens_, vocab, largest)
                                      : first_at_or_above<std::uint32_t>(data_, tokens_, vocab, largest);
  if (at < 0) return;
  std::int32_t t;
  copy(at, 1, &t);
  throw std::runtime_error(path() + ": token " + std::to_string(static_cast<std::uint32_t>(t)) + " at offset " +
                           std::to_string(at) + " (tokens from the start of the data) is outside the vocabulary of " +
                           std::to_string(vocab) + " (model.vocab_size)");
}

ShardStream::ShardStream(std::vector<const TokenShard*> shards, std::size_t of) : shards_(std::move(shards)), of_(of) {
  starts_.reserve(shards_.size() + 1);
  starts_.push_back(0);
  for (const TokenShard* s : shards_) starts_.push_back(starts_.back() + s->size());
}

void ShardStream::copy(std::int64_t begin, std::span<std::int32_t> out) const {
  const std::int64_t n = static_cast<std::int64_t>(out.size());
  if (begin < 0 || n > size() || begin > size() - n)
    throw std::out_of_range("ShardStream: tokens [" + std::to_string(begin) + ", " + std::to_string(begin + n) +
                            ") outside the stream of " + std::to_string(size()) + " tokens");
  std::size_t k = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin()) - 1;
  for (std::int64_t pos = begin, i = 0; i < n; ++k) {
    const std::int64_t offset = pos - starts_[k], take = std::min(shards_[k]->size() - offset, n - i);
    shards_[k]->copy(offset, take, out.data() + i);
    i += take;
    pos += take;
  }
}

std::string ShardStream::describe() const {
  return std::to_string(shards_.size()) + " of " + std::to_string(of_) + " shard" + (of_ == 1 ? "" : "s") + ", " +
         std::to_string(size()) + " tokens";
}

std::string ShardStream::origin() const {
  if (shards_.empty()) return "(no shards)";
  return shards_.front()->path() + (shards_.size() > 1 ? " and " + std::to_string(shards_.size() - 1) + " more" : "");
}

void write_llmc_shard(const std::string& path, std::span<const std::int32_t> tokens) {
  std::int32_t top = 0;
  for (std::int32_t t : tokens) {
    if (t < 0) throw std::invalid_argument(path + ": negative token id " + std::to_string(t));
    top = std::max(top, t);
  }
  if (tokens.size() > static_cast<std::size_t>(INT32_MAX))
    throw std::invalid_argument(path + ": more tokens than an llm.c header can count");
  const bool narrow = top <= 0xffff;
  write_file_atomically(path, [&](const ByteSink& sink) {
    std::vector<std::int32_t> header(256, 0);
    header[0] = kLlmcMagic;
    header[1] = narrow ? 1 : 2;
    header[2] = static_cast<std::int32_t>(tokens.size());
    sink(header.data(), kLlmcHeaderBytes);
    if (!narrow) {
      sink(tokens.data(), tokens.size() * 4);
      return;
    }
    std::vector<std::uint16_t> chunk;
    for (std::size_t i = 0; i < tokens.size(); i += 1 << 16) {
      const std::size_t n = std::min<std::size_t>(tokens.size() - i, 1 << 16);
      chunk.assign(tokens.begin() + static_cast<std::ptrdiff_t>(i), tokens.begin() + static_cast<std::ptrdiff_t>(i + n));
      sink(chunk.data(), n * 2);
    }
  });
}

}  // namespace codistill::data::text
