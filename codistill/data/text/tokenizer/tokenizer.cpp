#include "codistill/data/text/tokenizer/tokenizer.hpp"

#include <xxhash.h>

#include <stdexcept>

#include "codistill/data/text/tokenizer/pretokenize.hpp"

namespace codistill::data::text {

Tokenizer::Tokenizer() : Tokenizer(std::vector<Merge>{}) {}

Tokenizer::Tokenizer(std::vector<Merge> merges) : merges_(std::move(merges)) {
  bytes_.reserve(static_cast<std::size_t>(vocab_size()));
  for (int b = 0; b < 256; ++b) bytes_.emplace_back(1, static_cast<char>(b));
  bytes_.emplace_back();  // end of document: no bytes
  rank_.reserve(merges_.size() * 2);
  for (std::size_t i = 0; i < merges_.size(); ++i) {
    const Merge m = merges_[i];
    const std::int32_t limit = kFirstMergeToken + static_cast<std::int32_t>(i);
    for (std::int32_t part : {m.left, m.right})
      if (part < 0 || part >= limit || part == kEndOfDocument)
        throw std::invalid_argument("tokenizer: merge " + std::to_string(i) + " (" + std::to_string(m.left) + ", " +
                                    std::to_string(m.right) + ") uses token " + std::to_string(part) +
                                    ", which is not a byte or an earlier merge's token (valid: 0..255, 257.." +
                                    std::to_string(limit - 1) + ")");
    if (!rank_.emplace(pair_key(m.left, m.right), static_cast<std::int32_t>(i)).second)
      throw std::invalid_argument("tokenizer: merge " + std::to_string(i) + " (" + std::to_string(m.left) + ", " +
                                  std::to_string(m.right) + ") repeats an earlier merge");
    bytes_.push_back(bytes_[static_cast<std::size_t>(m.left)] + bytes_[static_cast<std::size_t>(m.right)]);
  }
  XXH64_state_t* st = XXH64_createState();
  if (!st) throw std::bad_alloc();
  XXH64_reset(st, 0);
  XXH64_update(st, kPretokenizerName.data(), kPretokenizerName.size());
  const char zero = 0;
  XXH64_update(st, &zero, 1);
  for (const Merge& m : merges_) {
    unsigned char le[8];
    for (int k = 0; k < 4; ++k) {
      le[k] = static_cast<unsigned char>(static_cast<std::uint32_t>(m.left) >> (8 * k));
      le[4 + k] = static_cast<unsigned char>(static_cast<std::uint32_t>(m.right) >> (8 * k));
    }
    XXH64_update(st, le, sizeof le);
  }
  digest_ = XXH64_digest(st);
  XXH64_freeState(st);
}

void Tokenizer::encode_chunk(std::string_view chunk, std::vector<std::int32_t>& out) const {
  // Chunks are at most kMaxChunkBytes long, so the quadratic search below is bounded.
  if (chunk.size() > kMaxChunkBytes)
    throw std::invalid_argument("tokenizer: a chunk of " + std::to_string(chunk.size()) + " bytes, the most is " +
                                std::to_string(kMaxChunkBytes) + " (encode() splits text into chunks)");
  std::int32_t sym[kMaxChunkBytes];
  std::size_t n = 0;
  for (char c : chunk) sym[n++] = static_cast<unsigned char>(c);
  while (n > 1) {
    std::int32_t best = -1;
    for (std::size_t i = 0; i + 1 < n; ++i) {
      auto it = rank_.find(pair_key(sym[i], sym[i + 1]));
      if (it != rank_.end() && (best < 0 || it->second < best)) best = it->second;
    }
    if (best < 0) break;
    const Merge m = merges_[static_cast<std::size_t>(best)];
    std::size_t w = 0;
    for (std::size_t i = 0; i < n;) {
      if (i + 1 < n && sym[i] == m.left && sym[i + 1] == m.right) {
        sym[w++] = kFirstMergeToken + best;
        i += 2;
      } else {
        sym[w++] = sym[i++];
      }
    }
    n = w;
  }
  out.insert(out.end(), sym, sym + n);
}

void Tokenizer::encode(std::string_view text, std::vector<std::int32_t>& out) const {
  for_each_chunk(text, [&](std::string_view chunk) { encode_chunk(chunk, out); });
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> out;
  encode(text, out);
  return out;
}

std::string_view Tokenizer::token_bytes(std::int32_t id) const {
  if (id < 0 || id >= vocab_size())
    throw std::out_of_range("tokenizer: token " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(vocab_size()) + ")");
  return bytes_[static_cast<std::size_t>(id)];
}

std::string Tokenizer::decode(std::span<const std::int32_t> tokens) const {
  std::string s;
  for (std::int32_t t : tokens) s += token_bytes(t);
  return s;
}

void Encoder::encode(std::string_view text, std::vector<std::int32_t>& out) {
  for_each_chunk(text, [&](std::string_view chunk) {
    auto it = cache_.find(chunk);
    if (it == cache_.end()) {
      if (cache_.size() >= max_entries_) cache_.clear();
      std::vector<std::int32_t> tokens;
      tok_->encode_chunk(chunk, tokens);
      it = cache_.emplace(std::string(chunk), std::move(tokens)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  });
}

}  // namespace codistill::data::text
