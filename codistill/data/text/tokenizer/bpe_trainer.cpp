#include "codistill/data/text/tokenizer/bpe_trainer.hpp"

#include <algorithm>
#include <queue>
#include <stdexcept>

#include "codistill/data/text/tokenizer/pretokenize.hpp"

namespace codistill::data::text {

void ChunkCounts::add_text(std::string_view text) {
  for_each_chunk(text, [&](std::string_view chunk) { add_chunk(chunk); });
}

void ChunkCounts::add_chunk(std::string_view chunk, std::int64_t count) {
  auto it = counts_.find(std::string(chunk));
  if (it == counts_.end())
    counts_.emplace(std::string(chunk), count);
  else
    it->second += count;
}

namespace {

struct Word {
  std::vector<std::int32_t> sym;
  std::int64_t count = 0;
};

// Heap entry: higher count first; equal counts: the smaller pair key (left, then right).
struct Candidate {
  std::int64_t count;
  std::uint64_t key;
  bool operator<(const Candidate& o) const { return count != o.count ? count < o.count : key > o.key; }
};

class Trainer {
 public:
  explicit Trainer(const ChunkCounts& chunks) {
    words_.reserve(chunks.counts().size());
    for (const auto& [chunk, count] : chunks.counts()) {
      if (chunk.size() < 2) continue;  // nothing to merge in one byte
      Word w;
      w.count = count;
      w.sym.reserve(chunk.size());
      for (char c : chunk) w.sym.push_back(static_cast<unsigned char>(c));
      words_.push_back(std::move(w));
    }
    for (std::size_t wi = 0; wi < words_.size(); ++wi) {
      const Word& w = words_[wi];
      for (std::size_t i = 0; i + 1 < w.sym.size(); ++i) {
        const std::uint64_t k = pair_key(w.sym[i], w.sym[i + 1]);
        pair_count_[k] += w.count;
        where_[k].push_back(static_cast<std::int32_t>(wi));
      }
    }
    for (const auto& [k, c] : pair_count_) heap_.push({c, k});
  }

  // The best pair with its count, or count 0 when none is left.
  Candidate best() {
    while (!heap_.empty()) {
      Candidate c = heap_.top();
      auto it = pair_count_.find(c.key);
      if (it != pair_count_.end() && it->second == c.count) return c;
      heap_.pop();  // stale: the pair's count changed since this entry was pushed
    }
    return {0, 0};
  }

  void merge(std::uint64_t key, std::int32_t token) {
    heap_.pop();
    const std::int32_t left = static_cast<std::int32_t>(key >> 32), right = static_cast<std::int32_t>(key & 0xFFFFFFFFu);
    std::vector<std::int32_t> words = std::move(where_[key]);
    where_.erase(key);
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
    touched_.clear();
    for (std::int32_t wi : words) merge_word(words_[static_cast<std::size_t>(wi)], wi, left, right, token);
    std::sort(touched_.begin(), touched_.end());
    touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
    for (std::uint64_t k : touched_) {
      auto it = pair_count_.find(k);
      if (it == pair_count_.end()) continue;
      if (it->second <= 0)
        pair_count_.erase(it);
      else
        heap_.push({it->second, k});
    }
  }

 private:
  void add(std::uint64_t k, std::int64_t delta) {
    pair_count_[k] += delta;
    touched_.push_back(k);
  }

  void merge_word(Word& w, std::int32_t wi, std::int32_t left, std::int32_t right, std::int32_t token) {
    std::vector<std::int32_t>& s = w.sym;
    bool found = false;
    for (std::size_t i = 0; i + 1 < s.size() && !found; ++i) found = s[i] == left && s[i + 1] == right;
    if (!found) return;  // the index may list a word whose pair an earlier merge consumed
    // Words are short (<= kMaxChunkBytes): subtracting all their pairs and adding the new
    // ones back is simpler than patching neighbours and costs about the same.
    for (std::size_t i = 0; i + 1 < s.size(); ++i) add(pair_key(s[i], s[i + 1]), -w.count);
    std::size_t out = 0;
    for (std::size_t i = 0; i < s.size();) {
      if (i + 1 < s.size() && s[i] == left && s[i + 1] == right) {
        s[out++] = token;
        i += 2;
      } else {
        s[out++] = s[i++];
      }
    }
    s.resize(out);
    for (std::size_t i = 0; i + 1 < s.size(); ++i) {
      const std::uint64_t k = pair_key(s[i], s[i + 1]);
      add(k, w.count);
      // Pairs without the new token were in this word before and are indexed already.
      if (s[i] == token || s[i + 1] == token) where_[k].push_back(wi);
    }
  }

  std::vector<Word> words_;
  std::unordered_map<std::uint64_t, std::int64_t> pair_count_;
  std::unordered_map<std::uint64_t, std::vector<std::int32_t>> where_;
  std::priority_queue<Candidate> heap_;
  std::vector<std::uint64_t> touched_;
};

}  // namespace

BpeResult train_bpe(const ChunkCounts& chunks, const BpeOptions& options) {
  if (options.vocab_size < kFirstMergeToken)
    throw std::invalid_argument("BPE: vocab_size must be at least 257 (256 bytes + end-of-document), got " +
                                std::to_string(options.vocab_size));
  if (options.min_pair_count < 1)
    throw std::invalid_argument("BPE: min_pair_count must be >= 1, got " + std::to_string(options.min_pair_count));
  Trainer trainer(chunks);
  BpeResult result;
  const std::size_t want = static_cast<std::size_t>(options.vocab_size - kFirstMergeToken);
  result.merges.reserve(want);
  while (result.merges.size() < want) {
    const Candidate c = trainer.best();
    if (c.count < options.min_pair_count) {
      result.stopped_early = true;
      break;
    }
    const std::int32_t token = kFirstMergeToken + static_cast<std::int32_t>(result.merges.size());
    result.merges.push_back({static_cast<std::int32_t>(c.key >> 32), static_cast<std::int32_t>(c.key & 0xFFFFFFFFu)});
    trainer.merge(c.key, token);
  }
  return result;
}

}  // namespace codistill::data::text
