// BpeModel's encoding (bpe_model.hpp): added tokens, pre-tokenization, then the merges of
// each word in the order `tokenizers` applies them.
#include <queue>

#include "codistill/data/text/tokenizer/bpe_model.hpp"
#include "codistill/data/text/tokenizer/pretokenize.hpp"
#include "codistill/data/text/tokenizer/regex_split.hpp"

namespace codistill::data::text {

namespace {

// A pair that may be merged: its rank, where its left symbol is, and the token it makes.
struct Candidate {
  std::int32_t rank, pos, id;
  // The queue's top is the lowest rank, then the leftmost position.
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

void BpeModel::encode_word(std::string_view word, std::vector<std::int32_t>& out) const {
  if (word.size() == 1) {
    out.push_back(byte_id_[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (spec_.ignore_merges) {
    if (auto it = id_of_.find(std::string(word)); it != id_of_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Symbols in a doubly linked list (merged-away ones are dead), and a queue of candidate
  // merges checked when popped: the pair at `pos` may have changed since it was queued.
  const auto n = static_cast<std::int32_t>(word.size());
  std::vector<std::int32_t> id(word.size()), prev(word.size()), next(word.size());
  std::vector<char> alive(word.size(), 1);
  for (std::int32_t i = 0; i < n; ++i) {
    id[i] = byte_id_[static_cast<unsigned char>(word[i])];
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  std::priority_queue<Candidate> queue;
  auto offer = [&](std::int32_t pos) {
    if (auto it = merge_.find(pair_key(id[pos], id[next[pos]])); it != merge_.end())
      queue.push({it->second.rank, pos, it->second.id});
  };
  for (std::int32_t i = 0; i + 1 < n; ++i) offer(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    if (!alive[c.pos] || next[c.pos] < 0) continue;
    const std::int32_t right = next[c.pos];
    auto it = merge_.find(pair_key(id[c.pos], id[right]));
    if (it == merge_.end() || it->second.id != c.id) continue;  // stale: `tokenizers` compares the new id only
    id[c.pos] = c.id;
    alive[right] = 0;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    if (prev[c.pos] >= 0) offer(prev[c.pos]);
    if (next[c.pos] >= 0) offer(c.pos);
  }
  for (std::int32_t i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
}

void BpeModel::encode_piece(std::string_view piece, std::vector<std::int32_t>& out, WordCache* cache) const {
  auto word = [&](std::string_view w) {
    if (!cache) return encode_word(w, out);
    auto it = cache->find(w);
    if (it == cache->end()) {
      std::vector<std::int32_t> ids;
      encode_word(w, ids);
      it = cache->emplace(std::string(w), std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  };
  std::string prefixed;
  if (spec_.add_prefix_space && piece[0] != ' ') {
    prefixed = " " + std::string(piece);
    piece = prefixed;
  }
  switch (spec_.pre_tokenizer) {
    case PreTokenizer::kGpt2:
      regex_->split(piece, word);
      break;
    case PreTokenizer::kChunksV1:
      for_each_chunk(piece, word);
      break;
    case PreTokenizer::kNone:
      word(piece);
      break;
  }
}

void BpeModel::encode_added(std::string_view text, bool normalized_pass, std::vector<std::int32_t>& out,
                            WordCache* cache) const {
  auto rest = [&](std::string_view piece) {
    if (piece.empty()) return;
    if (normalized_pass)
      encode_piece(piece, out, cache);
    else
      encode_added(piece, true, out, cache);
  };
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size();) {
    // Leftmost-longest, as `tokenizers`' Aho-Corasick matcher.
    const AddedToken* best = nullptr;
    for (const AddedToken& a : spec_.added)
      if (a.normalized == normalized_pass && a.content[0] == text[i] && text.compare(i, a.content.size(), a.content) == 0 &&
          (!best || a.content.size() > best->content.size()))
        best = &a;
    if (!best) {
      ++i;
      continue;
    }
    rest(text.substr(start, i - start));
    out.push_back(best->id);
    i += best->content.size();
    start = i;
  }
  rest(text.substr(start));
}

void BpeModel::encode(std::string_view text, std::vector<std::int32_t>& out, WordCache* cache) const {
  if (!spec_.added.empty())
    encode_added(text, false, out, cache);
  else if (!text.empty())
    encode_piece(text, out, cache);
}

std::vector<std::int32_t> BpeModel::encode(std::string_view text) const {
  std::vector<std::int32_t> out;
  encode(text, out);
  return out;
}

}  // namespace codistill::data::text
