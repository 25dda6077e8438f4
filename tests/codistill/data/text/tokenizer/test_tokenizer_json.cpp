// Hugging Face tokenizer.json (byte-level BPE): exact ids on small hand-made vocabularies
// (GPT-2's pre-tokenizer, merge order, added tokens, prefix space, ignore_merges), the
// project's tokenizer through the file and back, and every refusal naming file and field.
// The comparison with `tokenizers` itself is tests/scripts/test_tokenizer_json.py.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codistill/data/text/tokenizer/bpe_model.hpp"
#include "codistill/data/text/tokenizer/bpe_trainer.hpp"
#include "codistill/data/text/tokenizer/byte_level.hpp"
#include "codistill/data/text/tokenizer/tokenizer_json.hpp"
#include "codistill/data/text/text_test_util.hpp"

using namespace codistill;
using namespace codistill::data::text;
using nlohmann::json;
using V = std::vector<std::int32_t>;

namespace {

// A GPT-2-style file: <|endoftext|> is id 0, byte b is id 1 + b, then one id per token of
// `tokens` (byte-level strings), in order; merges as given ("left right").
json gpt2_file(const std::vector<std::string>& tokens, const std::vector<std::string>& merges) {
  json vocab = json::object();
  vocab["<|endoftext|>"] = 0;
  for (int b = 0; b < 256; ++b) vocab[byte_level_char(static_cast<unsigned char>(b))] = 1 + b;
  for (std::size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = 257 + i;
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", json::array({{{"id", 0}, {"content", "<|endoftext|>"}, {"single_word", false},
                                         {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}}})},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
          {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
                     {"merges", merges}}}};
}

BpeModel load(const json& j) { return parse_tokenizer_json(j.dump(), "hand.json"); }

// Ids of a string's bytes in gpt2_file's layout.
V bytes_of(std::string_view s) {
  V v;
  for (char c : s) v.push_back(1 + static_cast<unsigned char>(c));
  return v;
}

V cat(std::initializer_list<V> parts) {
  V v;
  for (const V& p : parts) v.insert(v.end(), p.begin(), p.end());
  return v;
}

void refused(const json& j, const std::string& what) {
  INFO(j.dump().substr(0, 300));
  CHECK_THROWS_WITH(load(j), Catch::StartsWith("hand.json: ") && Catch::Contains(what));
}

}  // namespace

TEST_CASE("a GPT-2-style file: ids from its vocabulary, words from GPT-2's regex", "[text][tokenizer_json]") {
  // Tokens 257 "Ġt", 258 "he", 259 "Ġthe", 260 "ll", 261 "'s".
  const BpeModel m = load(gpt2_file({"Ġt", "he", "Ġthe", "ll", "'s"}, {"Ġ t", "h e", "Ġt he", "l l", "' s"}));
  CHECK(m.vocab_size() == 262);
  CHECK(m.end_of_document() == 0);
  CHECK(m.encode("the") == cat({bytes_of("t"), V{258}}));
  CHECK(m.encode(" the") == V{259});
  CHECK(m.encode("the the") == cat({bytes_of("t"), V{258}, V{259}}));
  // "'s" is a word of its own; "he" and "ll" merge inside "hello"; digits, punctuation and
  // spaces are words of their own ("  " before a word leaves its last space to it).
  CHECK(m.encode("it's") == cat({bytes_of("it"), V{261}}));
  CHECK(m.encode("hello") == cat({V{258, 260}, bytes_of("o")}));
  CHECK(m.encode("a  the") == cat({bytes_of("a "), V{259}}));
  CHECK(m.encode("x42!?") == bytes_of("x42!?"));
  CHECK(m.encode("") == V{});
  // The literal special token is its id, wherever it stands.
  CHECK(m.encode("the<|endoftext|>the") == cat({bytes_of("t"), V{258}, V{0}, bytes_of("t"), V{258}}));
  CHECK(m.decode(m.encode("the the<|endoftext|>\n")) == "the the\n");
}

TEST_CASE("merges apply lowest rank first, leftmost first among equals, as tokenizers does", "[text][tokenizer_json]") {
  // 257 "bc" (rank 0), 258 "ab" (rank 1): "abc" takes "bc" first and never forms "ab".
  CHECK(load(gpt2_file({"bc", "ab"}, {"b c", "a b"})).encode("abc") == cat({bytes_of("a"), V{257}}));
  // "aaa" with "a a": the leftmost pair first, then nothing.
  CHECK(load(gpt2_file({"aa"}, {"a a"})).encode("aaa") == cat({V{257}, bytes_of("a")}));
  // A merge of a token a later merge makes (rank 0 "x"+"yz", rank 1 "y"+"z"): applied as soon
  // as its pair appears, before the remaining rank-1 pairs.
  CHECK(load(gpt2_file({"yz", "xyz"}, {"x yz", "y z"})).encode("xyzyz") == V{258, 257});
}

TEST_CASE("added tokens, prefix space and ignore_merges", "[text][tokenizer_json]") {
  json j = gpt2_file({"ab"}, {"a b"});
  // Leftmost-longest among added tokens; a normalized one is matched in the second pass.
  j["model"]["vocab"]["<x>"] = 258;
  j["added_tokens"].push_back({{"id", 258}, {"content", "<x>"}, {"normalized", true}, {"special", false}});
  j["added_tokens"].push_back({{"id", 259}, {"content", "<x>y"}, {"normalized", true}, {"special", false}});
  const BpeModel m = load(j);
  CHECK(m.encode("ab<x>yab<x>") == V{257, 259, 257, 258});
  j["pre_tokenizer"]["add_prefix_space"] = true;
  CHECK(load(j).encode("ab<x>ab") == cat({bytes_of(" "), V{257}, V{258}, bytes_of(" "), V{257}}));
  // ignore_merges: a word that is a token is that token even without a merge making it.
  json k = gpt2_file({"cd", "Ġxyz"}, {"c d"});
  CHECK(load(k).encode(" xyz") == bytes_of(" xyz"));
  k["model"]["ignore_merges"] = true;
  CHECK(load(k).encode(" xyz cd") == V{258, 1 + ' ', 257});
}

TEST_CASE("the project's tokenizer through tokenizer.json is the same tokenizer", "[text][tokenizer_json]") {
  ChunkCounts counts;
  for (const auto& t : test::text::project_docs()) counts.add_text(t);
  const Tokenizer tok(train_bpe(counts, {1500, 2}).merges);
  const BpeModel written = BpeModel::from_tokenizer(tok);
  const BpeModel read = parse_tokenizer_json(tokenizer_json_text(written), "own.json");
  REQUIRE(read.as_project_tokenizer().has_value());
  CHECK(read.as_project_tokenizer()->merges() == tok.merges());
  CHECK(read.digest() == tok.digest());
  CHECK(read.end_of_document() == kEndOfDocument);
  CHECK(tokenizer_json_text(read) == tokenizer_json_text(written));
  for (std::string t : test::text::project_docs()) {
    // The literal <|endoftext|> is the one difference (docs/text-data.md): the file's added
    // token, as `tokenizers` has it, against the project's bytes.
    for (std::size_t at; (at = t.find("<|endoftext|>")) != std::string::npos;) t.replace(at, 13, "<|end|>");
    CHECK(read.encode(t) == tok.encode(t));
  }
  CHECK(read.encode("a<|endoftext|>") == V{'a', kEndOfDocument});
  CHECK(tok.encode("a<|endoftext|>").size() > 2);
  Rng rng(5);
  for (int i = 0; i < 20; ++i) {
    const std::string s = test::text::random_bytes(1 + rng.below(3000), rng);
    CHECK(read.encode(s) == tok.encode(s));
  }
  // A GPT-2-style model has a digest of its own.
  CHECK(load(gpt2_file({"ab"}, {"a b"})).digest() != load(gpt2_file({"ba"}, {"b a"})).digest());
}

TEST_CASE("GPT-2's pre-tokenizer takes any bytes and decodes back", "[text][tokenizer_json]") {
  const BpeModel m = load(gpt2_file({"Ġt", "he", "Ġthe"}, {"Ġ t", "h e", "Ġt he"}));
  Rng rng(9);
  for (int i = 0; i < 50; ++i) {
    const std::string s = test::text::random_bytes(1 + rng.below(2000), rng);  // mostly invalid UTF-8
    CHECK(m.decode(m.encode(s)) == s);
  }
  // Unicode: White_Space as tokenizers has it (NEL and NBSP are spaces, U+180E is not).
  CHECK(m.encode("a\u00a0\u00a0b").size() == bytes_of("a\u00a0\u00a0b").size());
  CHECK(m.encode("\u0416\u0443\u043a 42") == bytes_of("\u0416\u0443\u043a 42"));
}

TEST_CASE("what tokenizers would encode differently is refused, naming file and field", "[text][tokenizer_json]") {
  const json base = gpt2_file({"ab"}, {"a b"});
  CHECK_THROWS_WITH(parse_tokenizer_json("{", "hand.json"), Catch::StartsWith("hand.json: not valid JSON"));
  json j = base;
  j["model"]["type"] = "WordPiece";
  refused(j, "model.type is \"WordPiece\": only BPE");
  j = base;
  j["model"]["dropout"] = 0.1;
  refused(j, "model.dropout is 0.1");
  j = base;
  j["model"]["byte_fallback"] = true;
  refused(j, "model.byte_fallback is true");
  j = base;
  j["model"]["continuing_subword_prefix"] = "##";
  refused(j, "model.continuing_subword_prefix is \"##\"");
  j = base;
  j["normalizer"] = {{"type", "NFC"}};
  refused(j, "normalizer is {\"type\":\"NFC\"}");
  j = base;
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  refused(j, "supported are ByteLevel");
  j = base;
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({
      {{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}, {"invert", false}},
      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  refused(j, "the Split pattern '\\w+' is not one codistill reproduces");
  j = base;
  j["post_processor"] = {{"type", "TemplateProcessing"}};
  refused(j, "post_processor TemplateProcessing");
  j = base;
  j["padding"] = {{"length", 8}};
  refused(j, "padding is");
  j = base;
  j["added_tokens"][0]["lstrip"] = true;
  refused(j, "added_tokens[0].lstrip is true");
  j = base;
  j["added_tokens"].push_back({{"id", 300}, {"content", "<pad>"}});
  refused(j, "added_tokens[1] ('<pad>') has id 300, but `tokenizers` would give it 258");
  j = base;
  j["model"]["merges"].push_back("a zz");
  refused(j, "model.merges[1] (a zz): 'zz' is not in model.vocab");
  j = base;
  j["model"]["merges"].push_back("abc");
  refused(j, "model.merges[1] is \"abc\"");
  j = base;
  j["model"]["vocab"]["far"] = 2000000000;
  refused(j, "token id 2000000000 is too large for a vocabulary of 260 tokens");
  j = base;
  j["model"]["vocab"].erase(byte_level_char('q'));
  refused(j, "no token for byte 0x71 ('q')");
}
