#include "codistill/data/text/tokenizer/bpe_model.hpp"

#include <xxhash.h>

#include <stdexcept>

#include "codistill/data/text/tokenizer/byte_level.hpp"
#include "codistill/data/text/tokenizer/regex_split.hpp"

namespace codistill::data::text {

namespace {

std::string hex_byte(int b) {
  const char* digits = "0123456789abcdef";
  return std::string("0x") + digits[b >> 4] + digits[b & 15];
}

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

}  // namespace

BpeModel::BpeModel(BpeModelSpec spec) : spec_(std::move(spec)) { check_and_index(); }

void BpeModel::check_and_index() {
  std::int64_t largest = -1;
  for (const auto& [s, id] : spec_.vocab) largest = std::max<std::int64_t>(largest, id);
  for (const auto& a : spec_.added) largest = std::max<std::int64_t>(largest, a.id);
  // Ids index tables here and in every model: a file with a few tokens at huge ids would
  // make them huge, so ids must be dense (real vocabularies are: 0..n-1).
  const auto tokens = static_cast<std::int64_t>(spec_.vocab.size() + spec_.added.size());
  if (largest >= INT32_MAX || largest >= 2 * tokens + 1024)
    bad("token id " + std::to_string(largest) + " is too large for a vocabulary of " + std::to_string(tokens) +
        " tokens (ids must cover at least half of 0.." + std::to_string(largest) + ")");
  vocab_size_ = static_cast<std::int32_t>(largest + 1);
  bytes_.assign(static_cast<std::size_t>(vocab_size_), std::nullopt);
  std::vector<char> in_vocab(static_cast<std::size_t>(vocab_size_), 0);
  for (const auto& [s, id] : spec_.vocab) {
    if (id < 0) bad("token '" + s + "' has the negative id " + std::to_string(id));
    if (in_vocab[static_cast<std::size_t>(id)]) bad("id " + std::to_string(id) + " is given to two tokens");
    in_vocab[static_cast<std::size_t>(id)] = 1;
    std::optional<std::string> b = byte_level_decode(s);
    if (b && !b->empty()) {
      if (!id_of_.emplace(*b, id).second) bad("two tokens stand for the same bytes ('" + s + "')");
      bytes_[static_cast<std::size_t>(id)] = std::move(*b);
    } else {
      bytes_[static_cast<std::size_t>(id)] = s;  // unreachable by merges; decodes to itself
    }
  }
  for (int b = 0; b < 256; ++b) {
    auto it = id_of_.find(std::string(1, static_cast<char>(b)));
    if (it == id_of_.end())
      bad("the vocabulary has no token for byte " + hex_byte(b) + " ('" + byte_level_char(static_cast<unsigned char>(b)) +
          "'): text holding it could not be encoded");
    byte_id_[static_cast<std::size_t>(b)] = it->second;
  }
  for (std::size_t r = 0; r < spec_.merges.size(); ++r) {
    const auto& m = spec_.merges[r];
    for (std::int32_t id : {m.left, m.right, m.result})
      if (id < 0 || id >= vocab_size_ || !in_vocab[static_cast<std::size_t>(id)])
        bad("merge " + std::to_string(r) + " uses id " + std::to_string(id) + ", which is not in the vocabulary");
    merge_.insert_or_assign(pair_key(m.left, m.right), MergeTarget{static_cast<std::int32_t>(r), m.result});
  }
  for (const auto& a : spec_.added) {
    if (a.content.empty()) bad("an added token (id " + std::to_string(a.id) + ") has no content");
    if (a.id < 0) bad("added token '" + a.content + "' has the negative id " + std::to_string(a.id));
    if (!bytes_[static_cast<std::size_t>(a.id)]) bytes_[static_cast<std::size_t>(a.id)] = a.content;
  }
  const std::int32_t eod = spec_.end_of_document;
  if (eod != -1) {
    bool found = false;
    for (const auto& a : spec_.added) found = found || a.id == eod;
    if (!found) bad("the end-of-document id " + std::to_string(eod) + " is not an added token");
  }
  if (spec_.pre_tokenizer == PreTokenizer::kGpt2) regex_ = std::make_shared<RegexSplitter>(std::string(kGpt2Pattern));
  if (spec_.pre_tokenizer == PreTokenizer::kChunksV1 && spec_.add_prefix_space)
    bad("the chunks-v1 pre-tokenizer does not add a prefix space");
  project_ = std::nullopt;
  digest_ = compute_digest();
}

BpeModel BpeModel::from_tokenizer(const Tokenizer& tok) {
  BpeModelSpec s;
  s.pre_tokenizer = PreTokenizer::kChunksV1;
  for (int b = 0; b < 256; ++b) s.vocab.emplace_back(byte_level_char(static_cast<unsigned char>(b)), b);
  s.vocab.emplace_back("<|endoftext|>", kEndOfDocument);
  s.added.push_back({"<|endoftext|>", kEndOfDocument, false, true});
  s.end_of_document = kEndOfDocument;
  for (std::size_t i = 0; i < tok.merges().size(); ++i) {
    const std::int32_t id = kFirstMergeToken + static_cast<std::int32_t>(i);
    s.vocab.emplace_back(byte_level_encode(tok.token_bytes(id)), id);
    s.merges.push_back({tok.merges()[i].left, tok.merges()[i].right, id});
  }
  return BpeModel(std::move(s));
}

std::uint64_t BpeModel::compute_digest() {
  // The project's own layout: then the model is that Tokenizer, and has its digest.
  const auto& s = spec_;
  bool project = s.pre_tokenizer == PreTokenizer::kChunksV1 && !s.ignore_merges && s.end_of_document == kEndOfDocument &&
                 s.added.size() == 1 && s.added[0].content == "<|endoftext|>" && !s.added[0].normalized &&
                 s.vocab.size() == static_cast<std::size_t>(kFirstMergeToken) + s.merges.size() &&
                 vocab_size_ == static_cast<std::int32_t>(s.vocab.size());
  for (int b = 0; project && b < 256; ++b) project = byte_id_[static_cast<std::size_t>(b)] == b;
  std::vector<Merge> merges;
  for (std::size_t i = 0; project && i < s.merges.size(); ++i) {
    project = s.merges[i].result == kFirstMergeToken + static_cast<std::int32_t>(i);
    merges.push_back({s.merges[i].left, s.merges[i].right});
  }
  if (project) {
    try {
      project_.emplace(std::move(merges));
      for (std::int32_t id = kFirstMergeToken; project && id < vocab_size_; ++id)
        project = project_->token_bytes(id) == token_bytes(id);
    } catch (const std::invalid_argument&) {
      project = false;
    }
    if (project) return project_->digest();
    project_.reset();
  }
  XXH64_state_t* st = XXH64_createState();
  if (!st) throw std::bad_alloc();
  XXH64_reset(st, 0);
  auto add = [&](const void* p, std::size_t n) { XXH64_update(st, p, n); };
  auto add_int = [&](std::int64_t v) { add(&v, sizeof v); };  // the digest is of this machine's (x86-64) layout
  auto add_str = [&](std::string_view v) {
    add_int(static_cast<std::int64_t>(v.size()));
    add(v.data(), v.size());
  };
  add_str("codistill-bpe-model-v1");
  add_int(static_cast<int>(s.pre_tokenizer));
  add_int(s.add_prefix_space);
  add_int(s.ignore_merges);
  add_int(s.end_of_document);
  std::vector<const std::string*> by_id(static_cast<std::size_t>(vocab_size_), nullptr);
  for (const auto& [str, id] : s.vocab) by_id[static_cast<std::size_t>(id)] = &str;
  for (const std::string* str : by_id) str ? add_str(*str) : add_int(-1);
  for (const auto& m : s.merges) add_int(m.left), add_int(m.right), add_int(m.result);
  for (const auto& a : s.added) add_int(a.id), add_int(a.normalized), add_str(a.content);
  const std::uint64_t d = XXH64_digest(st);
  XXH64_freeState(st);
  return d;
}

std::string_view BpeModel::token_bytes(std::int32_t id) const {
  if (id < 0 || id >= vocab_size_ || !bytes_[static_cast<std::size_t>(id)])
    throw std::out_of_range("tokenizer: id " + std::to_string(id) + " is not a token of this vocabulary");
  return *bytes_[static_cast<std::size_t>(id)];
}

std::string BpeModel::decode(std::span<const std::int32_t> ids) const {
  std::string s;
  for (std::int32_t id : ids)
    if (id != spec_.end_of_document) s += token_bytes(id);
  return s;
}

}  // namespace codistill::data::text
