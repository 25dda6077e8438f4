// The byte-level BPE tokenizer: pre-splitting, a hand-checked training example, ties,
// exact round trips on random bytes and real text, determinism, and the vocabulary file.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "codistill/data/text/tokenizer/bpe_trainer.hpp"
#include "codistill/data/text/tokenizer/pretokenize.hpp"
#include "codistill/data/text/tokenizer/tokenizer.hpp"
#include "support/process.hpp"
#include "support/test_util.hpp"
#include "codistill/data/text/text_test_util.hpp"

using namespace codistill;
using namespace codistill::data::text;
using codistill::test::text::project_docs;
using codistill::test::text::random_bytes;

namespace {

std::vector<std::string> chunks_of(std::string_view s) {
  std::vector<std::string> out;
  for_each_chunk(s, [&](std::string_view c) { out.emplace_back(c); });
  return out;
}

Tokenizer trained_on_docs(std::int32_t vocab) {
  ChunkCounts counts;
  for (const auto& t : project_docs()) counts.add_text(t);
  return Tokenizer(train_bpe(counts, {vocab, 2}).merges);
}

}  // namespace

TEST_CASE("text is split into words with their leading space, digit and punctuation runs", "[text][tokenizer]") {
  using V = std::vector<std::string>;
  CHECK(chunks_of("Hello world") == V{"Hello", " world"});
  CHECK(chunks_of("\n    def f(x):") == V{"\n   ", " def", " f", "(", "x", "):"});
  CHECK(chunks_of("a  b") == V{"a", " ", " b"});
  CHECK(chunks_of("x=42;\n") == V{"x", "=", "42", ";", "\n"});
  CHECK(chunks_of("caf\xc3\xa9 ok") == V{"caf\xc3\xa9", " ok"});  // UTF-8 stays in its word
  CHECK(chunks_of("  ") == V{"  "});
  // A long run is cut every kMaxChunkBytes bytes, and chunks always rebuild the text.
  const std::string run(300, 'z');
  const auto cut = chunks_of(run);
  REQUIRE(cut.size() == 3);
  CHECK(cut[0].size() == kMaxChunkBytes);
  Rng rng(test::fresh_seed());
  for (int i = 0; i < 50; ++i) {
    const std::string s = random_bytes(rng.below(400), rng);
    std::string joined;
    for (const auto& c : chunks_of(s)) {
      CHECK(!c.empty());
      CHECK(c.size() <= kMaxChunkBytes);
      joined += c;
    }
    CHECK(joined == s);
  }
}

TEST_CASE("BPE merges the most frequent pair first, hand-checked", "[text][bpe]") {
  // Pairs: (a,b) 3+2 = 5, (b,c) 3+1 = 4, (b,d) 2. After a+b -> 257: (257,c) 3, (257,d) 2,
  // (b,c) 1 (the lone "bc"); then 257+c -> 258, 257+d -> 259; (b,c) occurs once: stop.
  ChunkCounts counts;
  counts.add_chunk("abc", 3);
  counts.add_chunk("abd", 2);
  counts.add_chunk("bc", 1);
  const BpeResult r = train_bpe(counts, {1000, 2});
  CHECK(r.stopped_early);
  CHECK(r.merges == std::vector<Merge>{{'a', 'b'}, {257, 'c'}, {257, 'd'}});
  const Tokenizer tok(r.merges);
  CHECK(tok.vocab_size() == 260);
  CHECK(tok.encode("abc") == std::vector<std::int32_t>{258});
  CHECK(tok.encode("abd bc") == std::vector<std::int32_t>{259, ' ', 'b', 'c'});
  CHECK(tok.token_bytes(258) == "abc");
  // The vocabulary size caps the merges.
  CHECK(train_bpe(counts, {258, 2}).merges == std::vector<Merge>{{'a', 'b'}});
  CHECK_FALSE(train_bpe(counts, {258, 2}).stopped_early);
}

TEST_CASE("BPE breaks ties by the smaller pair and handles overlapping pairs", "[text][bpe]") {
  ChunkCounts ties;
  ties.add_chunk("cd", 2);
  ties.add_chunk("ab", 2);
  CHECK(train_bpe(ties, {1000, 2}).merges == std::vector<Merge>{{'a', 'b'}, {'c', 'd'}});

  // "aaaa": (a,a) occurs 3 times; merged left to right it gives [257, 257], then 258.
  ChunkCounts run;
  run.add_chunk("aaaa", 1);
  const auto merges = train_bpe(run, {1000, 1}).merges;
  CHECK(merges == std::vector<Merge>{{'a', 'a'}, {257, 257}});
  const Tokenizer tok(merges);
  CHECK(tok.encode("aaaa") == std::vector<std::int32_t>{258});
  CHECK(tok.encode("aaa") == std::vector<std::int32_t>{257, 'a'});
  CHECK(tok.encode("aaaaa") == std::vector<std::int32_t>{258, 'a'});
}

TEST_CASE("BPE training is deterministic and independent of the order of the text", "[text][bpe]") {
  auto docs = project_docs();
  REQUIRE(docs.size() >= 3);
  ChunkCounts forward, backward;
  for (const auto& t : docs) forward.add_text(t);
  for (auto it = docs.rbegin(); it != docs.rend(); ++it) backward.add_text(*it);
  const auto a = train_bpe(forward, {1500, 2}).merges;
  const auto b = train_bpe(backward, {1500, 2}).merges;
  REQUIRE(a.size() == 1500 - 257);
  CHECK(a == b);
  CHECK(Tokenizer(a).digest() == Tokenizer(b).digest());
  CHECK(Tokenizer(a).digest() != Tokenizer(std::vector<Merge>(a.begin(), a.end() - 1)).digest());
}

TEST_CASE("decode(encode(s)) == s on random bytes and on real text", "[text][tokenizer]") {
  const Tokenizer tok = trained_on_docs(2000);
  Encoder cached(tok);
  Rng rng(test::fresh_seed());
  for (int i = 0; i < 200; ++i) {
    const std::string s = random_bytes(rng.below(2000), rng);
    const auto t = tok.encode(s);
    CHECK(tok.decode(t) == s);
    std::vector<std::int32_t> c;
    cached.encode(s, c);
    CHECK(c == t);
    for (auto id : t) CHECK((id >= 0 && id < tok.vocab_size() && id != kEndOfDocument));
  }
  std::size_t bytes = 0, tokens = 0;
  for (const auto& doc : project_docs()) {
    const auto t = tok.encode(doc);
    CHECK(tok.decode(t) == doc);
    std::vector<std::int32_t> c;
    cached.encode(doc, c);
    CHECK(c == t);
    bytes += doc.size();
    tokens += t.size();
  }
  // Trained on this very text: far fewer tokens than bytes.
  CHECK(static_cast<double>(bytes) / static_cast<double>(tokens) > 2.5);
}

TEST_CASE("the end-of-document token decodes to nothing, ids outside the vocabulary throw", "[text][tokenizer]") {
  const Tokenizer tok;
  CHECK(tok.vocab_size() == 257);
  const std::vector<std::int32_t> t{'h', 'i', kEndOfDocument, '!'};
  CHECK(tok.decode(t) == "hi!");
  const std::vector<std::int32_t> bad{257};
  CHECK_THROWS_WITH(tok.decode(bad), Catch::Contains("outside the vocabulary [0, 257)"));
  std::vector<std::int32_t> out;
  CHECK_THROWS_WITH(tok.encode_chunk(std::string(kMaxChunkBytes + 1, 'x'), out), Catch::Contains("a chunk of 129 bytes"));
  CHECK_THROWS_WITH(Tokenizer(std::vector<Merge>{{'a', 300}}), Catch::Contains("merge 0"));
  CHECK_THROWS_WITH(Tokenizer(std::vector<Merge>{{'a', kEndOfDocument}}), Catch::Contains("not a byte"));
  CHECK_THROWS_WITH(Tokenizer(std::vector<Merge>{{'a', 'b'}, {'a', 'b'}}), Catch::Contains("repeats"));
}

TEST_CASE("the vocabulary file round-trips and every damage is named with its line", "[text][tokenizer]") {
  codistill::test::TempDir dir;
  const Tokenizer tok = trained_on_docs(400);
  const std::string path = dir.str("tokenizer.bpe");
  tok.save(path);
  const Tokenizer back = Tokenizer::load(path);
  CHECK(back.merges() == tok.merges());
  CHECK(back.digest() == tok.digest());

  const std::string good = tok.to_text();
  auto rejects = [&](std::string text, const std::string& expected) {
    INFO(expected);
    CHECK_THROWS_WITH(Tokenizer::from_text(text, "vocab.bpe"),
                      Catch::StartsWith("vocab.bpe: line") && Catch::Contains(expected));
  };
  rejects("", "ends early");
  rejects("hello\n", "not a codistill tokenizer file");
  rejects(good.substr(0, good.size() / 2), "");
  rejects(good.substr(0, good.size() - 1), "no newline");
  // The first merge changed to another valid one: only the checksum can tell.
  REQUIRE(good.find("merges 143\n") != std::string::npos);
  std::string edited = good;
  const std::size_t first = good.find("merges 143\n") + 11;
  edited.replace(first, good.find('\n', first) - first, "1 2");
  rejects(edited, "checksum mismatch");
  std::string vocab = good;
  vocab.replace(vocab.find("vocab_size 400"), 14, "vocab_size 401");
  rejects(vocab, "does not match vocab_size");
  rejects(good + "extra\n", "after the checksum");
  // A merge that uses a later token is refused before the checksum is looked at.
  rejects("codistill-bpe-tokenizer 1\npretokenizer chunks-v1\nvocab_size 258\nend_of_document 256\nmerges 1\n97 257\n"
          "xxh64 0000000000000000\n",
          "merge 0 (97, 257)");
  CHECK_THROWS_WITH(Tokenizer::load(dir.str("missing.bpe")), Catch::Contains("missing.bpe: cannot open"));
}

TEST_CASE("incremental BPE training equals recounting every pair at every merge", "[text][bpe]") {
  // The reference: the textbook algorithm, all pair counts recomputed from the words
  // before each merge, the same tie-break. Slow, obviously right.
  ChunkCounts counts;
  for (const auto& t : project_docs()) counts.add_text(t);
  std::vector<std::pair<std::vector<std::int32_t>, std::int64_t>> words;
  for (const auto& [chunk, n] : counts.counts()) {
    std::vector<std::int32_t> w;
    for (char c : chunk) w.push_back(static_cast<unsigned char>(c));
    words.emplace_back(w, n);
  }
  std::vector<Merge> reference;
  for (std::int32_t token = kFirstMergeToken; token < 700; ++token) {
    std::map<std::pair<std::int32_t, std::int32_t>, std::int64_t> pairs;
    for (const auto& [w, n] : words)
      for (std::size_t i = 0; i + 1 < w.size(); ++i) pairs[{w[i], w[i + 1]}] += n;
    std::pair<std::int32_t, std::int32_t> best{-1, -1};
    std::int64_t best_n = 0;
    for (const auto& [p, n] : pairs)  // ascending pairs: the first of the highest count wins
      if (n > best_n) {
        best = p;
        best_n = n;
      }
    if (best_n < 2) break;
    reference.push_back({best.first, best.second});
    for (auto& [w, n] : words) {
      std::vector<std::int32_t> merged;
      for (std::size_t i = 0; i < w.size();) {
        if (i + 1 < w.size() && w[i] == best.first && w[i + 1] == best.second) {
          merged.push_back(token);
          i += 2;
        } else {
          merged.push_back(w[i++]);
        }
      }
      w = merged;
    }
  }
  REQUIRE(reference.size() == 700 - 257);
  CHECK(train_bpe(counts, {700, 2}).merges == reference);
}
